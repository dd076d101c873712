// The in-memory backend (memory_store.h): a database's records in ordered maps under one
// mutex, which every call holds from its first check to its last change, so that each call
// is a transaction; the refusals of errors.h, as the SQL backends give them; leases on the
// monotonic clock; wake-ups on a LocalBus of the database's own, published before the lock is
// let go, so that listeners hear them in the order of the writes.

#include "storage/memory_store.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "storage/errors.h"
#include "storage/local_bus.h"
#include "storage/registry.h"

namespace fedcase::storage {
namespace {

using nlohmann::json;
using RoundKey = std::pair<JobId, RoundIndex>;

// Seconds on the monotonic clock, and on the wall clock (unix).
double steady_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Lease {
  std::string holder;
  Epoch epoch = kUnleased;
  double expiry = 0;  // steady_now() seconds
};

struct Round {
  RoundRecord record;                             // its state, admitting and admitted kept current
  std::vector<UpdateRecord> updates;              // in the order they were admitted
  std::map<std::string, PartialRecord> partials;  // by replica
  std::map<std::pair<std::string, ClientId>, std::string> messages;  // (kind, client): body
  struct Upload {
    UploadRecord record;  // chunks and seconds kept current
    std::vector<std::string> chunks;
  };
  std::map<std::string, Upload> uploads;  // by id
};

// One database, shared by the stores opened on it.
struct Database {
  Mutex mu;
  std::map<ClientId, ClientRecord> clients FEDCASE_GUARDED_BY(mu);
  std::map<std::string, ClientId> tokens FEDCASE_GUARDED_BY(mu);  // token hash: client
  std::map<JobId, JobRecord> jobs FEDCASE_GUARDED_BY(mu);
  std::map<JobId, std::string> modules FEDCASE_GUARDED_BY(mu);
  std::map<JobId, Lease> leases FEDCASE_GUARDED_BY(mu);
  std::map<TenantId, TenantRecord> tenants FEDCASE_GUARDED_BY(mu);
  std::map<TenantId, TenantService> service FEDCASE_GUARDED_BY(mu);
  std::map<RoundKey, Round> rounds FEDCASE_GUARDED_BY(mu);
  // Per job: each public key a secure round accepted, and that round.
  std::map<JobId, std::map<std::string, RoundIndex>> used_keys FEDCASE_GUARDED_BY(mu);
  std::map<std::pair<JobId, uint64_t>, ModelRecord> models FEDCASE_GUARDED_BY(mu);
  std::map<uint64_t, ContactBatch> contact_batches FEDCASE_GUARDED_BY(mu);  // by number
  uint64_t next_client FEDCASE_GUARDED_BY(mu) = 1;
  uint64_t next_client_change FEDCASE_GUARDED_BY(mu) = 1;
  uint64_t next_contact_batch FEDCASE_GUARDED_BY(mu) = 1;
  uint64_t next_job FEDCASE_GUARDED_BY(mu) = 1;
  uint64_t next_tenant FEDCASE_GUARDED_BY(mu) = 1;
  const std::shared_ptr<LocalBus> bus = std::make_shared<LocalBus>();
};

LeaseRecord lease_record(JobId job, const Lease& lease) {
  const double remaining = lease.expiry - steady_now();
  return {job, lease.holder, lease.epoch, unix_now() + remaining, remaining};
}

class MemoryStore : public Store {
 public:
  explicit MemoryStore(std::shared_ptr<Database> db) : db_(std::move(db)) {}

  Result<ClientId> add_client(const ClientRecord& c) override {
    MutexLock lock(db_->mu);
    if (db_->tokens.count(c.token_hash)) return conflict("another client holds that token hash");
    ClientRecord stored = c;
    stored.id = db_->next_client++;
    stored.change = db_->next_client_change++;
    db_->tokens[c.token_hash] = stored.id;
    db_->clients[stored.id] = stored;
    wake(Channel::kClient, stored.id);
    return stored.id;
  }

  Result<ClientRecord> get_client(ClientId id) override {
    MutexLock lock(db_->mu);
    auto it = db_->clients.find(id);
    if (it == db_->clients.end()) return not_found("client " + std::to_string(id) + " not found");
    return it->second;
  }

  Result<ClientRecord> find_client(const std::string& token_hash) override {
    MutexLock lock(db_->mu);
    auto it = db_->tokens.find(token_hash);
    if (it == db_->tokens.end()) return not_found("no client holds that token");
    return db_->clients.at(it->second);
  }

  Result<std::vector<ClientRecord>> clients_changed_after(uint64_t after,
                                                          size_t limit) override {
    MutexLock lock(db_->mu);
    std::vector<ClientRecord> changed;
    for (const auto& [id, c] : db_->clients) {
      if (c.change > after) changed.push_back(c);
    }
    std::sort(changed.begin(), changed.end(),
              [](const ClientRecord& a, const ClientRecord& b) { return a.change < b.change; });
    if (changed.size() > limit) changed.resize(limit);
    return changed;
  }

  Status update_clients(const std::vector<ClientRecord>& clients) override {
    MutexLock lock(db_->mu);
    for (const ClientRecord& c : clients) {
      if (!db_->clients.count(c.id)) {
        return not_found("client " + std::to_string(c.id) + " not found");
      }
    }
    if (clients.empty()) return ok_status();
    std::map<ClientId, ClientRecord> last;  // each client once, with the last of its records
    for (const ClientRecord& c : clients) {
      ClientRecord& stored = db_->clients.at(c.id);
      stored.profile = c.profile;
      stored.last_seen = c.last_seen;
      last[c.id] = ClientRecord{c.id, "", json(), c.profile, 0, c.last_seen};
    }
    const uint64_t number = db_->next_contact_batch++;
    ContactBatch& batch = db_->contact_batches[number];
    batch.number = number;
    for (auto& [id, contact] : last) {
      batch.saved_at = std::max(batch.saved_at, contact.last_seen);
      batch.contacts.push_back(std::move(contact));
    }
    const double saved_at = batch.saved_at;
    for (auto it = db_->contact_batches.begin(); it != db_->contact_batches.end();) {
      it = it->second.saved_at < saved_at - kContactBatchesKeptS ? db_->contact_batches.erase(it)
                                                                 : std::next(it);
    }
    wake(Channel::kClient, number);
    return ok_status();
  }

  Result<std::vector<ContactBatch>> contacts_after(uint64_t after, size_t limit) override {
    MutexLock lock(db_->mu);
    std::vector<ContactBatch> out;
    for (auto it = db_->contact_batches.upper_bound(after);
         it != db_->contact_batches.end() && out.size() < limit; ++it) {
      out.push_back(it->second);
    }
    return out;
  }

  Result<JobId> create_job(const JobRecord& job, const ModelRecord& initial_model,
                           const std::string& module) override {
    MutexLock lock(db_->mu);
    JobRecord stored = job;
    stored.id = db_->next_job++;
    db_->jobs[stored.id] = stored;
    ModelRecord model = initial_model;
    model.job = stored.id;
    db_->models[{stored.id, model.version}] = model;
    if (!module.empty()) db_->modules[stored.id] = module;
    db_->leases[stored.id] = Lease{};
    wake(Channel::kJob, stored.id);
    return stored.id;
  }

  Result<std::string> get_job_module(JobId id) override {
    MutexLock lock(db_->mu);
    auto it = db_->modules.find(id);
    if (it == db_->modules.end()) {
      return not_found("job " + std::to_string(id) + " has no module");
    }
    return it->second;
  }

  Result<JobRecord> get_job(JobId id) override {
    MutexLock lock(db_->mu);
    auto it = db_->jobs.find(id);
    if (it == db_->jobs.end()) return not_found("job " + std::to_string(id) + " not found");
    return it->second;
  }

  Result<std::vector<JobRecord>> list_jobs() override {
    MutexLock lock(db_->mu);
    return values(db_->jobs);
  }

  Status set_job_state(JobId id, JobState state, Epoch epoch) override {
    MutexLock lock(db_->mu);
    FEDCASE_RETURN_IF_ERROR(fence(id, epoch, Code::kNotFound));
    db_->jobs.at(id).state = state;
    wake(Channel::kJob, id);
    return ok_status();
  }

  Result<TenantId> add_tenant(const TenantRecord& tenant) override {
    MutexLock lock(db_->mu);
    for (const auto& [id, t] : db_->tenants) {
      if (t.name == tenant.name || t.token_hash == tenant.token_hash) {
        return conflict("a tenant of that name or token hash exists");
      }
    }
    TenantRecord stored = tenant;
    stored.id = db_->next_tenant++;
    db_->tenants[stored.id] = stored;
    wake(Channel::kTenant, stored.id);
    return stored.id;
  }

  Result<std::vector<TenantRecord>> list_tenants() override {
    MutexLock lock(db_->mu);
    return values(db_->tenants);
  }

  Status open_round(const RoundRecord& round) override {
    MutexLock lock(db_->mu);
    FEDCASE_RETURN_IF_ERROR(fence(round.job, round.epoch, Code::kConflict));
    const RoundKey key{round.job, round.index};
    if (db_->rounds.count(key)) {
      return conflict("job " + std::to_string(round.job) + " already has a round " +
                      std::to_string(round.index));
    }
    Round& stored = db_->rounds[key];
    stored.record = round;
    stored.record.state = RoundState::kOpen;
    stored.record.admitting = true;
    stored.record.admitted = 0;
    wake(Channel::kRound, round.job);
    return ok_status();
  }

  Result<bool> admit_update(const UpdateRecord& u) override {
    MutexLock lock(db_->mu);
    Round* round = find_round(u.job, u.round);
    AdmissionFacts facts;
    facts.client_known = db_->clients.count(u.client) > 0;
    if (round) {
      const RoundRecord& r = round->record;
      facts = {true,
               r.state,
               r.target,
               r.admitting,
               r.admitted,
               updated(*round, u.client),
               facts.client_known};
    }
    FEDCASE_RETURN_IF_ERROR(check_admission(u.job, u.round, u.client, facts));
    round->updates.push_back(u);
    RoundRecord& r = round->record;
    ++r.admitted;
    const bool filled = r.target > 0 && r.admitted == r.target;
    if (filled) wake(Channel::kRound, u.job);
    return filled;
  }

  Status withdraw_update(JobId job, RoundIndex index, ClientId client,
                         const std::string& replica) override {
    MutexLock lock(db_->mu);
    Round* round = find_round(job, index);
    FEDCASE_RETURN_IF_ERROR(check_admitting(job, index, round != nullptr,
                                            round && round->record.state == RoundState::kOpen,
                                            round && round->record.admitting));
    auto it = std::find_if(
        round->updates.begin(), round->updates.end(),
        [&](const UpdateRecord& u) { return u.client == client && u.replica == replica; });
    if (it == round->updates.end()) return nothing_to_withdraw(job, index, client, replica);
    round->updates.erase(it);
    --round->record.admitted;
    return ok_status();
  }

  Result<bool> has_update(JobId job, RoundIndex index, ClientId client) override {
    MutexLock lock(db_->mu);
    const Round* round = find_round(job, index);
    return round != nullptr && updated(*round, client);
  }

  Status close_admission(JobId job, RoundIndex index, Epoch epoch) override {
    return change_open_round(job, index, epoch,
                             [](storage::RoundRecord& r) { r.admitting = false; });
  }

  Result<AdmissionRecord> round_admission(JobId job, RoundIndex index) override {
    MutexLock lock(db_->mu);
    const Round* round = find_round(job, index);
    if (!round) return not_found(round_name(job, index) + " not found");
    const RoundRecord& r = round->record;
    AdmissionRecord admission{r.target, r.state == RoundState::kOpen && r.admitting, {}};
    for (const UpdateRecord& u : round->updates) ++admission.replicas[u.replica];
    return admission;
  }

  Status put_partial(const PartialRecord& p) override {
    MutexLock lock(db_->mu);
    Round* round = find_round(p.job, p.round);
    const uint64_t admitted =
        round ? static_cast<uint64_t>(
                    std::count_if(round->updates.begin(), round->updates.end(),
                                  [&](const UpdateRecord& u) { return u.replica == p.replica; }))
              : 0;
    FEDCASE_RETURN_IF_ERROR(check_partial(p, round != nullptr,
                                          round && round->record.state == RoundState::kOpen,
                                          round && round->record.admitting, admitted));
    if (!round->partials.emplace(p.replica, p).second) {
      return conflict("the replica already has a partial in " + round_name(p.job, p.round));
    }
    wake(Channel::kRound, p.job);
    return ok_status();
  }

  Result<std::vector<PartialRecord>> list_partials(JobId job, RoundIndex index) override {
    MutexLock lock(db_->mu);
    const Round* round = find_round(job, index);
    if (!round) return std::vector<PartialRecord>();
    return values(round->partials);
  }

  // Every message is checked before any is stored: all or none.
  Status put_stage_messages(const std::vector<StageMessage>& messages) override {
    FEDCASE_RETURN_IF_ERROR(check_stage_kinds(messages));
    MutexLock lock(db_->mu);
    std::set<std::tuple<JobId, RoundIndex, std::string, ClientId>> batch;
    for (const StageMessage& m : messages) {
      const Round* round = find_round(m.job, m.round);
      if (!round) return conflict(round_name(m.job, m.round) + " not found");
      if (round->record.state != RoundState::kOpen) {
        return conflict(round_name(m.job, m.round) + " is not open");
      }
      if (round->messages.count({m.kind, m.client}) ||
          !batch.emplace(m.job, m.round, m.kind, m.client).second) {
        return conflict("client " + std::to_string(m.client) + " already has a '" + m.kind +
                        "' message in " + round_name(m.job, m.round));
      }
    }
    std::set<JobId> woken;
    for (const StageMessage& m : messages) {
      find_round(m.job, m.round)->messages[{m.kind, m.client}] = m.body;
      woken.insert(m.job);
    }
    for (JobId job : woken) wake(Channel::kRound, job);
    return ok_status();
  }

  Result<std::vector<StageMessage>> list_stage_messages(JobId job, RoundIndex index,
                                                        const std::string& kind) override {
    MutexLock lock(db_->mu);
    std::vector<StageMessage> out;
    const Round* round = find_round(job, index);
    if (!round) return out;
    for (auto it = round->messages.lower_bound({kind, 0});
         it != round->messages.end() && it->first.first == kind; ++it) {
      out.push_back({job, index, kind, it->first.second, it->second});
    }
    return out;
  }

  Status put_used_keys(JobId job, RoundIndex round, const std::set<std::string>& keys,
                       uint64_t keep_rounds) override {
    MutexLock lock(db_->mu);
    std::map<std::string, RoundIndex>& used = db_->used_keys[job];
    for (const std::string& key : keys) used.emplace(key, round);
    for (auto it = used.begin(); it != used.end();) {
      it = it->second + keep_rounds < round ? used.erase(it) : std::next(it);
    }
    return ok_status();
  }

  Result<std::set<std::string>> list_used_keys(JobId job) override {
    MutexLock lock(db_->mu);
    std::set<std::string> out;
    auto it = db_->used_keys.find(job);
    if (it != db_->used_keys.end()) {
      for (const auto& entry : it->second) out.insert(entry.first);
    }
    return out;
  }

  Result<UploadRecord> open_upload(const UploadRecord& upload) override {
    MutexLock lock(db_->mu);
    Round* round = open_round_named(upload.job, upload.round);
    if (!round) return conflict(round_name(upload.job, upload.round) + " is not open");
    for (auto it = round->uploads.begin(); it != round->uploads.end(); ++it) {
      const UploadRecord& held = it->second.record;
      if (held.client != upload.client) continue;
      if (held.bytes == upload.bytes && held.chunk_bytes == upload.chunk_bytes &&
          held.sha256 == upload.sha256) {
        return held;
      }
      round->uploads.erase(it);
      break;
    }
    if (round->uploads.count(upload.id)) {
      return conflict("upload " + upload.id + " exists in " + round_name(upload.job, upload.round));
    }
    Round::Upload& opened = round->uploads[upload.id];
    opened.record = upload;
    opened.record.chunks = 0;
    opened.record.seconds = 0;
    return opened.record;
  }

  Result<UploadRecord> get_upload(JobId job, RoundIndex index, const std::string& id) override {
    MutexLock lock(db_->mu);
    auto upload = find_upload(job, index, id);
    if (!upload.ok()) return upload.status();
    return (*upload)->record;
  }

  Status put_upload_chunk(JobId job, RoundIndex index, const std::string& id, uint64_t chunk,
                          std::string_view bytes, double seconds) override {
    MutexLock lock(db_->mu);
    auto upload = find_upload(job, index, id);
    if (!upload.ok()) return upload.status();
    Round::Upload& u = **upload;
    if (chunk != u.chunks.size()) return next_chunk_expected(id, u.chunks.size());
    u.chunks.emplace_back(bytes);
    u.record.chunks = u.chunks.size();
    u.record.seconds += seconds;
    return ok_status();
  }

  Result<std::string> get_upload_chunk(JobId job, RoundIndex index, const std::string& id,
                                       uint64_t chunk) override {
    MutexLock lock(db_->mu);
    auto upload = find_upload(job, index, id);
    if (!upload.ok()) return upload.status();
    if (chunk >= (*upload)->chunks.size()) return chunk_not_stored(id, chunk);
    return (*upload)->chunks[chunk];
  }

  Status drop_upload(JobId job, RoundIndex index, const std::string& id) override {
    MutexLock lock(db_->mu);
    if (Round* round = find_round(job, index)) round->uploads.erase(id);
    return ok_status();
  }

  Status commit_round(const RoundRecord& round, const ModelRecord& model,
                      const json& policy_state) override {
    MutexLock lock(db_->mu);
    Round* stored = nullptr;
    FEDCASE_RETURN_IF_ERROR(concludable(round, stored));
    if (db_->models.count({model.job, model.version})) {
      return conflict("model " + std::to_string(model.version) + " of job " +
                      std::to_string(model.job) + " is already stored");
    }
    if (!db_->jobs.count(model.job)) {
      return conflict("job " + std::to_string(model.job) + " not found");
    }
    conclude(round, *stored, RoundState::kCommitted);
    db_->models[{model.job, model.version}] = model;
    db_->jobs.at(round.job).policy_state = policy_state;
    return ok_status();
  }

  Status fail_round(const RoundRecord& round) override {
    MutexLock lock(db_->mu);
    Round* stored = nullptr;
    FEDCASE_RETURN_IF_ERROR(concludable(round, stored));
    conclude(round, *stored, RoundState::kFailed);
    return ok_status();
  }

  Status add_round_metrics(JobId job, RoundIndex index, const json& metrics) override {
    MutexLock lock(db_->mu);
    Round* round = find_round(job, index);
    if (!round || round->record.state == RoundState::kOpen) {
      return not_found("closed " + round_name(job, index) + " not found");
    }
    round->record.metrics.update(metrics);
    return ok_status();
  }

  Result<std::vector<RoundRecord>> list_rounds(JobId job) override {
    MutexLock lock(db_->mu);
    std::vector<RoundRecord> out;
    for (auto it = db_->rounds.lower_bound({job, 0});
         it != db_->rounds.end() && it->first.first == job; ++it) {
      out.push_back(it->second.record);
    }
    return out;
  }

  Result<std::vector<UpdateRecord>> list_updates(JobId job, RoundIndex index) override {
    MutexLock lock(db_->mu);
    const Round* round = find_round(job, index);
    if (!round) return std::vector<UpdateRecord>();
    std::vector<UpdateRecord> out = round->updates;
    std::stable_sort(out.begin(), out.end(), [](const UpdateRecord& a, const UpdateRecord& b) {
      return a.received_at < b.received_at;
    });
    return out;
  }

  Status update_round_plan(JobId job, RoundIndex index, const json& plan, Epoch epoch) override {
    return change_open_round(job, index, epoch, [&](storage::RoundRecord& r) { r.plan = plan; });
  }

  Result<ModelRecord> get_model(JobId job, uint64_t version) override {
    MutexLock lock(db_->mu);
    auto it = db_->models.find({job, version});
    if (it == db_->models.end()) {
      return not_found("model " + std::to_string(version) + " of job " + std::to_string(job) +
                       " not found");
    }
    return it->second;
  }

  Result<ModelRecord> latest_model(JobId job) override {
    MutexLock lock(db_->mu);
    auto it = db_->models.upper_bound({job, UINT64_MAX});
    if (it == db_->models.begin() || std::prev(it)->first.first != job) {
      return not_found("model of job " + std::to_string(job) + " not found");
    }
    return std::prev(it)->second;
  }

  Result<LeaseRecord> acquire_lease(JobId job, const std::string& holder,
                                    double duration_s) override {
    FEDCASE_RETURN_IF_ERROR(check_lease_request(holder, duration_s));
    MutexLock lock(db_->mu);
    auto lease = find_lease(job);
    if (!lease.ok()) return lease.status();
    Lease& l = **lease;
    const double now = steady_now();
    if (!l.holder.empty() && l.holder != holder && l.expiry > now) {
      return lease_refused(lease_record(job, l));
    }
    l = {holder, l.epoch + 1, now + duration_s};
    wake(Channel::kLease, job);
    return lease_record(job, l);
  }

  Result<LeaseRecord> renew_lease(JobId job, const std::string& holder, Epoch epoch,
                                  double duration_s) override {
    FEDCASE_RETURN_IF_ERROR(check_lease_request(holder, duration_s));
    MutexLock lock(db_->mu);
    auto lease = find_lease(job);
    if (!lease.ok()) return lease.status();
    Lease& l = **lease;
    if (l.holder != holder || l.epoch != epoch) return lease_refused(lease_record(job, l));
    l.expiry = steady_now() + duration_s;
    return lease_record(job, l);
  }

  Status release_lease(JobId job, const std::string& holder, Epoch epoch) override {
    MutexLock lock(db_->mu);
    auto lease = find_lease(job);
    if (!lease.ok()) return lease.status();
    Lease& l = **lease;
    if (l.holder != holder || l.epoch != epoch) return lease_refused(lease_record(job, l));
    l.holder.clear();
    l.expiry = steady_now();
    wake(Channel::kLease, job);
    return ok_status();
  }

  Result<std::vector<LeaseRecord>> list_leases() override {
    MutexLock lock(db_->mu);
    std::vector<LeaseRecord> out;
    for (const auto& [job, lease] : db_->leases) out.push_back(lease_record(job, lease));
    return out;
  }

  Result<TenantService> charge_tenant(const ServiceCharge& charge) override {
    MutexLock lock(db_->mu);
    TenantService& s = db_->service[charge.tenant];
    s.tenant = charge.tenant;
    s.counter = std::max(charge.counter_at_least, std::max(0.0, s.counter + charge.counter));
    s.client_seconds = std::max(0.0, s.client_seconds + charge.client_seconds);
    return s;
  }

  Result<std::vector<TenantService>> list_tenant_service() override {
    MutexLock lock(db_->mu);
    return values(db_->service);
  }

  Status notify(Channel channel, uint64_t id) override {
    MutexLock lock(db_->mu);
    wake(channel, id);
    return ok_status();
  }

  Result<std::unique_ptr<Listener>> listen() override { return db_->bus->listen(); }

  Status ping() override { return ok_status(); }

 private:
  template <class Key, class Value>
  static std::vector<Value> values(const std::map<Key, Value>& records) {
    std::vector<Value> out;
    for (const auto& [key, value] : records) out.push_back(value);
    return out;
  }

  static bool updated(const Round& round, ClientId client) {
    return std::any_of(round.updates.begin(), round.updates.end(),
                       [&](const UpdateRecord& u) { return u.client == client; });
  }

  // Publishes a wake-up with the write that holds the lock.
  void wake(Channel channel, uint64_t id) FEDCASE_REQUIRES(db_->mu) {
    db_->bus->publish({{channel, id}});
  }

  Round* find_round(JobId job, RoundIndex index) FEDCASE_REQUIRES(db_->mu) {
    auto it = db_->rounds.find({job, index});
    return it == db_->rounds.end() ? nullptr : &it->second;
  }

  Result<Round::Upload*> find_upload(JobId job, RoundIndex index, const std::string& id)
      FEDCASE_REQUIRES(db_->mu) {
    if (Round* round = find_round(job, index)) {
      auto it = round->uploads.find(id);
      if (it != round->uploads.end()) return &it->second;
    }
    return upload_not_found(job, index, id);
  }

  // The round if it is open; nullptr otherwise.
  Round* open_round_named(JobId job, RoundIndex index) FEDCASE_REQUIRES(db_->mu) {
    Round* round = find_round(job, index);
    return round && round->record.state == RoundState::kOpen ? round : nullptr;
  }

  // Changes the open round `index` of `job` (`change`) at lease `epoch`, and wakes the
  // replicas; kConflict for a stale epoch or a round that is not open.
  Status change_open_round(JobId job, RoundIndex index, Epoch epoch,
                           const std::function<void(storage::RoundRecord&)>& change) {
    MutexLock lock(db_->mu);
    FEDCASE_RETURN_IF_ERROR(fence(job, epoch, Code::kConflict));
    Round* round = open_round_named(job, index);
    if (!round) return conflict(round_name(job, index) + " is not open");
    change(round->record);
    round->record.epoch = epoch;
    wake(Channel::kRound, job);
    return ok_status();
  }

  Result<Lease*> find_lease(JobId job) FEDCASE_REQUIRES(db_->mu) {
    auto it = db_->leases.find(job);
    if (it == db_->leases.end()) return not_found("job " + std::to_string(job) + " not found");
    return &it->second;
  }

  // OK if `epoch` is the job's lease epoch; `missing`: the error for an unknown job.
  Status fence(JobId job, Epoch epoch, Code missing) FEDCASE_REQUIRES(db_->mu) {
    auto it = db_->leases.find(job);
    if (it == db_->leases.end())
      return Status(missing, "job " + std::to_string(job) + " not found");
    return check_epoch(job, epoch, it->second.epoch, it->second.holder);
  }

  // OK if the writer of `round`'s conclusion holds the epoch and the round is open, which
  // `stored` then points to.
  Status concludable(const RoundRecord& round, Round*& stored) FEDCASE_REQUIRES(db_->mu) {
    FEDCASE_RETURN_IF_ERROR(fence(round.job, round.epoch, Code::kConflict));
    stored = open_round_named(round.job, round.index);
    if (!stored) return conflict(round_name(round.job, round.index) + " is not open");
    return ok_status();
  }

  // The round becomes `state` with the conclusion's closed_at, metrics and epoch; what its
  // admission left (partials, stage messages) goes.
  void conclude(const RoundRecord& round, Round& stored, RoundState state)
      FEDCASE_REQUIRES(db_->mu) {
    RoundRecord& r = stored.record;
    r.state = state;
    r.closed_at = round.closed_at;
    r.metrics = round.metrics;
    r.epoch = round.epoch;
    r.admitting = false;
    stored.partials.clear();
    stored.messages.clear();
    stored.uploads.clear();
    wake(Channel::kRound, round.job);
  }

  const std::shared_ptr<Database> db_;
};

}  // namespace

Result<std::unique_ptr<Store>> open_memory_store(const std::string& name) {
  // Never destroyed: stores may outlive static destructors.
  static Registry<Database>* named = new Registry<Database>;
  return std::unique_ptr<Store>(
      std::make_unique<MemoryStore>(name.empty() ? std::make_shared<Database>() : named->of(name)));
}

}  // namespace fedcase::storage
