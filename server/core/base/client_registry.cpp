#include "server/core/base/client_registry.h"

#include <algorithm>

#include "common/crypto.h"
#include "common/log.h"
#include "rounds/job_config.h"
#include "scheduling/pace.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

// online_until_ keeps a client this long past its availability's lapse: is_online() decides
// exactly (last contact + gap, computed the other way round, may round differently), and the
// round driver may ask about a `now` a tick older than a request's.
constexpr double kLapseSlackS = 10.0;

// Registration facts for the profile; `device` may carry probe measurements.
scheduling::DeviceReport device_report(const protocol::Registration& r) {
  scheduling::DeviceReport d;
  d.dataset_size = r.dataset_size;
  d.cache_capacity_bytes = r.cache_capacity_bytes;
  d.sample_bytes = r.device.sample_bytes;
  d.compute_ms_per_sample = r.device.compute_ms_per_sample;
  d.storage_read_bytes_per_s = r.device.storage_read_bytes_per_s;
  return d;
}

}  // namespace

ClientRegistry::ClientRegistry(storage::Store& store, scheduling::ProfileParams params,
                               std::function<void()> changed)
    : store_(store), params_(params), changed_(std::move(changed)) {}

namespace {

// `info` as JSON text without spaces (a string that is not UTF-8 has U+FFFD in its place).
std::string compact(const json& info) {
  return info.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The labels a stored client registered with (validated at registration); none when its info
// does not read as a registration.
std::map<std::string, std::string> labels_of(const json& info) {
  auto registration = protocol::read_registration(info);
  return registration.ok() ? std::move(registration->labels) : std::map<std::string, std::string>{};
}

}  // namespace

Result<ClientRegistry::Entry> ClientRegistry::entry_of(const storage::ClientRecord& record) {
  Entry entry;
  if (record.profile.is_object() && !record.profile.empty()) {
    auto loaded = scheduling::profile_from_json(record.profile);
    if (!loaded.ok()) return loaded.status();
    entry.profile = std::move(loaded).value();
  }
  entry.profile.id = record.id;
  entry.info = compact(record.info);
  entry.registered_at = record.registered_at;
  entry.last_seen = record.last_seen;
  entry.labels = labels_of(record.info);
  return entry;
}

Status ClientRegistry::load() {
  auto records = store_.list_clients();
  if (!records.ok()) return records.status();
  {
    MutexLock lock(mu_);
    rows_read_ += records->size();
    for (auto& record : *records) {
      read_up_to_ = std::max(read_up_to_, record.change);
      auto entry = entry_of(record);
      if (!entry.ok()) return entry.status();
      insert(record.token_hash, record.id, std::move(entry).value());
    }
    order_utilities();
  }
  // The kept batches: contacts saved since (their rows hold them too) and the cursor.
  return read_contacts().status();
}

void ClientRegistry::insert(const std::string& token_hash, ClientId id, Entry entry) {
  token_hashes_[token_hash] = id;
  Entry& c = clients_[id];
  if (c.online_until > 0) online_until_.erase({c.online_until, id});
  c = std::move(entry);
  c.online_until = 0;
  index_availability(id, c);
}

void ClientRegistry::index_availability(ClientId id, Entry& c) {
  if (c.online_until > 0) online_until_.erase({c.online_until, id});
  const scheduling::Availability& a = c.profile.availability;
  c.online_until =
      a.last_seen_s > 0 && a.steered_back_by_s == 0 ? a.last_seen_s + params_.offline_gap_s : 0;
  if (c.online_until > 0) online_until_.emplace(std::make_pair(c.online_until, id), &c);
}

void ClientRegistry::forget_lapsed(double now) {
  while (!online_until_.empty() && online_until_.begin()->first.first < now - kLapseSlackS) {
    online_until_.begin()->second->online_until = 0;
    online_until_.erase(online_until_.begin());
  }
}

template <typename F>
void ClientRegistry::for_each_available(double now, F f) const {
  for (auto it = online_until_.lower_bound({now - kLapseSlackS, 0}); it != online_until_.end();
       ++it) {
    const Entry& c = *it->second;
    if (scheduling::is_online(c.profile, now, params_)) f(it->first.second, c);
  }
}

void ClientRegistry::add_utility(const scheduling::ClientProfile& profile) {
  if (profile.utility_round == 0) return;
  utilities_.insert(std::upper_bound(utilities_.begin(), utilities_.end(), profile.utility),
                    profile.utility);
}

void ClientRegistry::remove_utility(double utility) {
  const auto at = std::lower_bound(utilities_.begin(), utilities_.end(), utility);
  if (at != utilities_.end() && *at == utility) utilities_.erase(at);
}

void ClientRegistry::order_utilities() {
  utilities_.clear();
  for (const auto& [id, c] : clients_) {
    if (c.profile.utility_round > 0) utilities_.push_back(c.profile.utility);
  }
  std::sort(utilities_.begin(), utilities_.end());
}

uint64_t ClientRegistry::rows_read() const {
  MutexLock lock(mu_);
  return rows_read_;
}

namespace {
constexpr size_t kPage = 1000;  // clients or contact batches read at once
}  // namespace

Status ClientRegistry::refresh() {
  bool changed = false;
  for (size_t read = kPage; read == kPage;) {
    uint64_t after;
    {
      MutexLock lock(mu_);
      after = read_up_to_;
    }
    auto records = store_.clients_changed_after(after, kPage);
    if (!records.ok()) return records.status();
    read = records->size();
    MutexLock lock(mu_);
    rows_read_ += records->size();
    for (auto& record : *records) {
      read_up_to_ = std::max(read_up_to_, record.change);
      if (clients_.count(record.id)) continue;  // learnt meanwhile (learn())
      auto entry = entry_of(record);
      if (!entry.ok()) return entry.status();
      add_utility(entry->profile);
      insert(record.token_hash, record.id, std::move(entry).value());
      changed = true;
    }
  }
  auto contacts = read_contacts();
  if (!contacts.ok()) return contacts.status();
  if ((changed || *contacts) && changed_) changed_();
  return ok_status();
}

Result<bool> ClientRegistry::read_contacts() {
  bool changed = false;
  for (size_t read = kPage; read == kPage;) {
    uint64_t after;
    {
      MutexLock lock(mu_);
      after = contacts_read_up_to_;
    }
    auto batches = store_.contacts_after(after, kPage);
    if (!batches.ok()) return batches.status();
    read = batches->size();
    if (after > 0 && !batches->empty() && batches->front().number > after + 1) {
      // Batches are numbered without gaps: those between were dropped before this registry
      // read them (it read nothing for kContactBatchesKeptS). Their contacts are in the rows.
      auto rows = contacts_from_rows();
      if (!rows.ok()) return rows.status();
      changed = *rows || changed;
    }
    MutexLock lock(mu_);
    rows_read_ += batches->size();
    for (const storage::ContactBatch& batch : *batches) {
      contacts_read_up_to_ = std::max(contacts_read_up_to_, batch.number);
      for (const storage::ClientRecord& contact : batch.contacts) {
        changed = take_contact(contact) || changed;
      }
    }
  }
  return changed;
}

Result<bool> ClientRegistry::contacts_from_rows() {
  bool changed = false;
  for (uint64_t after = 0, read = kPage; read == kPage;) {
    auto records = store_.clients_changed_after(after, kPage);
    if (!records.ok()) return records.status();
    read = records->size();
    MutexLock lock(mu_);
    rows_read_ += records->size();
    for (const storage::ClientRecord& record : *records) {
      after = std::max(after, record.change);
      changed = take_contact(record) || changed;
    }
  }
  return changed;
}

bool ClientRegistry::take_contact(const storage::ClientRecord& contact) {
  auto known = clients_.find(contact.id);
  if (known == clients_.end() || contact.last_seen <= known->second.last_seen) return false;
  // A contact saved by another replica (or by this one before a restart): a heartbeat, and if
  // that replica told the client to sleep, it sleeps here too.
  Entry& c = known->second;
  c.last_seen = contact.last_seen;
  scheduling::observe_heartbeat(c.profile, contact.last_seen, params_);
  auto stored = scheduling::profile_from_json(contact.profile);
  if (stored.ok()) c.profile.availability.steered_back_by_s = stored->availability.steered_back_by_s;
  index_availability(contact.id, c);
  return true;
}

std::optional<ClientId> ClientRegistry::identify(const std::string& token_hash) const {
  MutexLock lock(mu_);
  auto it = token_hashes_.find(token_hash);
  if (it == token_hashes_.end()) return std::nullopt;
  return it->second;
}

Result<std::optional<ClientId>> ClientRegistry::learn(const std::string& token_hash) {
  if (auto known = identify(token_hash)) return known;
  auto record = store_.find_client(token_hash);
  if (!record.ok()) {
    if (record.status().code() == Code::kNotFound) return std::optional<ClientId>();
    return record.status();
  }
  auto entry = entry_of(*record);
  if (!entry.ok()) return entry.status();
  const ClientId id = record->id;
  {
    MutexLock lock(mu_);
    if (clients_.count(id)) return std::optional<ClientId>(id);  // added meanwhile
    add_utility(entry->profile);
    insert(record->token_hash, id, std::move(entry).value());
  }
  if (changed_) changed_();
  return std::optional<ClientId>(id);
}

Result<ClientRegistry::Registration> ClientRegistry::register_client(
    const protocol::Registration& registration, double now) {
  scheduling::ClientProfile profile;
  FEDCASE_RETURN_IF_ERROR(
      scheduling::observe_registration(profile, device_report(registration), params_));
  scheduling::observe_heartbeat(profile, now, params_);
  auto token = random_token();
  if (!token.ok()) return token.status();
  storage::ClientRecord record{0,
                               sha256_hex(*token),
                               protocol::write_registration(registration),
                               scheduling::profile_to_json(profile),
                               now,
                               now};
  auto id = store_.add_client(record);
  if (!id.ok()) return id.status();
  profile.id = *id;
  Entry entry{compact(record.info), now, now, std::move(profile), registration.labels};
  {
    MutexLock lock(mu_);
    insert(record.token_hash, *id, std::move(entry));
  }
  if (changed_) changed_();
  return Registration{*id, *std::move(token)};
}

Status ClientRegistry::touch(ClientId client, double now) {
  bool changed = false;
  {
    MutexLock lock(mu_);
    auto it = clients_.find(client);
    if (it == clients_.end()) return not_found("client not found");
    Entry& c = it->second;
    changed = unsaved_.empty() || !scheduling::is_online(c.profile, now, params_);
    c.last_seen = std::max(c.last_seen, now);
    scheduling::observe_heartbeat(c.profile, now, params_);
    index_availability(client, c);
    forget_lapsed(now);
    unsaved_.insert(client);
  }
  if (changed && changed_) changed_();
  return ok_status();
}

Status ClientRegistry::steer(ClientId client, double now, double back_by) {
  bool changed = false;
  {
    MutexLock lock(mu_);
    auto it = clients_.find(client);
    if (it == clients_.end()) return not_found("client not found");
    Entry& c = it->second;
    changed = unsaved_.empty();
    c.last_seen = std::max(c.last_seen, now);
    scheduling::observe_steered(c.profile, now, back_by, params_);
    index_availability(client, c);
    forget_lapsed(now);
    unsaved_.insert(client);
  }
  if (changed && changed_) changed_();
  return ok_status();
}

double ClientRegistry::utility_rank(ClientId client) const {
  MutexLock lock(mu_);
  auto it = clients_.find(client);
  if (it == clients_.end() || it->second.profile.utility_round == 0) return 0.5;
  return scheduling::rank_among(utilities_, it->second.profile.utility);
}

std::map<ClientId, std::string> ClientRegistry::signing_keys(
    const std::vector<ClientId>& clients) const {
  std::map<ClientId, std::string> out;
  MutexLock lock(mu_);
  for (ClientId id : clients) {
    auto it = clients_.find(id);
    if (it == clients_.end()) continue;
    auto registration =
        protocol::read_registration(nlohmann::json::parse(it->second.info, nullptr, false));
    out[id] = registration.ok() ? std::move(registration->signing_public_key) : std::string();
  }
  return out;
}

size_t ClientRegistry::size() const {
  MutexLock lock(mu_);
  return clients_.size();
}

size_t ClientRegistry::available_count(double now) {
  MutexLock lock(mu_);
  forget_lapsed(now);
  size_t lapsed = 0;  // within the slack
  for (auto it = online_until_.begin(); it != online_until_.end() && it->first.first < now; ++it) {
    lapsed += !scheduling::is_online(it->second->profile, now, params_);
  }
  return online_until_.size() - lapsed;
}

void ClientRegistry::flush() {
  std::vector<ClientId> due;
  {
    MutexLock lock(mu_);
    due.assign(unsaved_.begin(), unsaved_.end());
  }
  if (!due.empty()) save(due);
}

bool ClientRegistry::has_unsaved() const {
  MutexLock lock(mu_);
  return !unsaved_.empty();
}

std::vector<ClientSnapshot> ClientRegistry::snapshot(double now) const {
  MutexLock lock(mu_);
  std::vector<ClientSnapshot> out;
  out.reserve(clients_.size());
  for (const auto& [id, c] : clients_) {
    storage::ClientRecord record{id, "", json::parse(c.info, nullptr, false), json(),
                                 c.registered_at, c.last_seen};
    out.push_back(
        {std::move(record), c.profile, scheduling::is_online(c.profile, now, params_), c.labels});
  }
  return out;
}

std::vector<ClientSnapshot> ClientRegistry::profiles(double now) const {
  MutexLock lock(mu_);
  std::vector<ClientSnapshot> out(clients_.size());
  size_t i = 0;
  for (const auto& [id, c] : clients_) {
    out[i].profile = c.profile;
    out[i].labels = c.labels;
    out[i++].available = scheduling::is_online(c.profile, now, params_);
  }
  return out;
}

ClientRegistry::Census ClientRegistry::census(double now) const {
  MutexLock lock(mu_);
  Census census;
  census.registered = clients_.size();
  for_each_available(now, [&](ClientId, const Entry&) { ++census.available; });
  return census;
}

ClientRegistry::Eligible ClientRegistry::eligible(double now,
                                                  const std::map<std::string, std::string>& labels,
                                                  const std::set<ClientId>& busy) const {
  MutexLock lock(mu_);
  Eligible out;
  for_each_available(now, [&](ClientId id, const Entry& c) {
    if (!rounds::labels_match(c.labels, labels)) return;
    ++out.available;
    out.free += !busy.count(id);
  });
  return out;
}

void ClientRegistry::apply(const std::vector<rounds::ProfileChange>& changes) {
  MutexLock lock(mu_);
  for (const auto& change : changes) {
    auto it = clients_.find(change.client);
    if (it == clients_.end()) continue;
    scheduling::ClientProfile& profile = it->second.profile;
    const double utility = profile.utility;
    const RoundIndex utility_round = profile.utility_round;
    Status s = rounds::apply_profile_change(change, profile, params_);
    if (!s.ok()) log_warn("client " + std::to_string(change.client) + ": " + s.to_string());
    if (profile.utility != utility || profile.utility_round != utility_round) {
      // One value moves in utilities_: a round's completions re-sort nothing.
      if (utility_round > 0) remove_utility(utility);
      add_utility(profile);
    }
  }
}

void ClientRegistry::save(const std::vector<ClientId>& ids) {
  for (size_t from = 0; from < ids.size(); from += kSavePage) {
    std::vector<storage::ClientRecord> records;
    {
      MutexLock lock(mu_);
      for (size_t i = from; i < std::min(ids.size(), from + kSavePage); ++i) {
        auto it = clients_.find(ids[i]);
        if (it == clients_.end()) continue;
        const Entry& c = it->second;
        storage::ClientRecord record;
        record.id = ids[i];
        record.profile = scheduling::profile_to_json(c.profile);
        record.last_seen = c.last_seen;
        records.push_back(std::move(record));
        unsaved_.erase(ids[i]);
      }
    }
    Status s = store_.update_clients(records);
    if (!s.ok()) log_warn("cannot save client profiles: " + s.to_string());
  }
}

}  // namespace fedcase::server
