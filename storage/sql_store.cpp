// The Store's logic over any SQL backend (sql.h): one implementation of every method, its
// transactions, fencing and admission, so that SQLite and PostgreSQL meet the contract the
// same way. Connections come from a small pool: SQLite's holds one, used by one call at a
// time; PostgreSQL's a few, so that calls run side by side.

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "common/crypto.h"
#include "common/mutex.h"
#include "storage/errors.h"
#include "storage/sql.h"

namespace fedcase::storage {

using nlohmann::json;

uint64_t AdmissionRecord::admitted() const {
  uint64_t n = 0;
  for (const auto& [replica, updates] : replicas) n += updates;
  return n;
}

const char* channel_name(Channel channel) {
  switch (channel) {
    case Channel::kJob:
      return "job";
    case Channel::kRound:
      return "round";
    case Channel::kLease:
      return "lease";
    case Channel::kClient:
      return "client";
    case Channel::kTenant:
      return "tenant";
  }
  return "job";
}

namespace sql {

std::optional<Channel> parse_channel(std::string_view name) {
  for (Channel c :
       {Channel::kJob, Channel::kRound, Channel::kLease, Channel::kClient, Channel::kTenant}) {
    if (name == channel_name(c)) return c;
  }
  return std::nullopt;
}

Params& Params::json(const nlohmann::json& v) {
  return owned_text(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Params& Params::owned_text(std::string v) {
  owned_.push_back(std::move(v));
  return text(owned_.back());
}

bool Rows::next() {
  if (!cursor_ || !status_.ok()) return false;
  return cursor_->next();
}

nlohmann::json Rows::json(int col) {
  nlohmann::json j = nlohmann::json::parse(bytes(col), nullptr, false);
  if (!j.is_discarded()) return j;
  corrupt("a JSON column does not parse");
  return nlohmann::json();
}

JobState Rows::job_state(int col) {
  const std::string name = bytes(col);
  if (auto state = parse_job_state(name)) return *state;
  corrupt("unknown job state '" + name + "'");
  return JobState::kRunning;
}

RoundState Rows::round_state(int col) {
  const std::string name = bytes(col);
  if (auto state = parse_round_state(name)) return *state;
  corrupt("unknown round state '" + name + "'");
  return RoundState::kOpen;
}

Status Rows::status() const {
  if (cursor_) {
    Status s = cursor_->status();
    if (!s.ok()) return s;
  }
  return status_;
}

void Rows::corrupt(const std::string& what) {
  if (status_.ok()) status_ = db_failed("corrupt row: " + what);
}

std::string render(std::string sql, const Dialect& d) {
  const std::pair<const char*, const std::string*> fragments[] = {{"{now}", &d.now},
                                                                  {"{lock_shared}", &d.lock_shared},
                                                                  {"{lock_update}", &d.lock_update},
                                                                  {"{greatest}", &d.greatest},
                                                                  {"{id}", &d.id},
                                                                  {"{int}", &d.integer},
                                                                  {"{real}", &d.real},
                                                                  {"{bytes}", &d.bytes}};
  for (const auto& [token, text] : fragments) {
    for (size_t at = sql.find(token); at != std::string::npos; at = sql.find(token, at)) {
      sql.replace(at, std::string_view(token).size(), *text);
      at += text->size();
    }
  }
  return sql;
}

namespace {

// Hands out connections, opening each on first need, at most `max` at once; a call that finds
// them all in use waits for one to come back.
class Pool {
 public:
  Pool(Driver& driver, size_t max) : driver_(driver), max_(std::max<size_t>(max, 1)) {}

  Result<std::unique_ptr<Connection>> take() {
    {
      MutexLock lock(mu_);
      while (idle_.empty() && open_ >= max_) returned_.wait(mu_);
      if (!idle_.empty()) {
        Result<std::unique_ptr<Connection>> c(std::move(idle_.back()));
        idle_.pop_back();
        return c;
      }
      ++open_;
    }
    auto c = driver_.connect();  // outside the lock: it may wait on the network
    if (!c.ok()) {
      MutexLock lock(mu_);
      --open_;
      returned_.notify_one();
    }
    return c;
  }

  // A lost connection is closed, and the idle ones with it: they went to the same server,
  // which is likely gone too, and the next calls connect anew.
  void give_back(std::unique_ptr<Connection> c) {
    std::vector<std::unique_ptr<Connection>> closing;
    {
      MutexLock lock(mu_);
      if (c->lost()) {
        closing.swap(idle_);
        open_ -= 1 + closing.size();
        closing.push_back(std::move(c));
        returned_.notify_all();
      } else {
        idle_.push_back(std::move(c));
        returned_.notify_one();
      }
    }
  }  // `closing` closes here, outside the lock

 private:
  Driver& driver_;
  const size_t max_;
  Mutex mu_;
  CondVar returned_;
  std::vector<std::unique_ptr<Connection>> idle_ FEDCASE_GUARDED_BY(mu_);
  size_t open_ FEDCASE_GUARDED_BY(mu_) = 0;  // idle and in use
};

// A connection taken from the pool for one call, given back when it goes out of scope.
class Borrowed {
 public:
  Borrowed(Pool& pool, std::unique_ptr<Connection> c) : pool_(pool), c_(std::move(c)) {}
  ~Borrowed() { pool_.give_back(std::move(c_)); }
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;
  Connection& operator*() { return *c_; }
  Connection* operator->() { return c_.get(); }

 private:
  Pool& pool_;
  std::unique_ptr<Connection> c_;
};

// A write's transaction: its statements, and the wake-ups its commit publishes.
class Txn {
 public:
  explicit Txn(Connection& c) : c_(c) {}
  Rows query(const std::string& sql, const Params& params) { return c_.query(sql, params); }
  void wake(Channel channel, uint64_t id) {
    for (const Notification& n : wakeups_) {
      if (n.channel == channel && n.id == id) return;
    }
    wakeups_.push_back({channel, id});
  }
  Connection& connection() { return c_; }
  const std::vector<Notification>& wakeups() const { return wakeups_; }

 private:
  Connection& c_;
  std::vector<Notification> wakeups_;
};

const Status& status_of(const Status& s) { return s; }
template <class T>
const Status& status_of(const Result<T>& r) {
  return r.status();
}

constexpr const char* kClientColumns =
    "id, token_hash, info, profile, registered_at, last_seen, change_seq";
constexpr const char* kJobColumns = "id, name, config, state, policy_state, created_at, tenant_id";
constexpr const char* kRoundColumns =
    "job_id, idx, state, base_version, selected, opened_at, deadline, closed_at, metrics, target, "
    "epoch, admitting, plan, admitted";
// The pieces a model's blob is stored in (insert_model).
constexpr size_t kModelPiece = 1u << 20;
constexpr const char* kUploadColumns =
    "id, client_id, bytes, chunk_bytes, sha256, meta, chunks, seconds";
constexpr const char* kModelColumns = "version, blob, checksum, optimizer_state, created_at";
constexpr const char* kLeaseColumns = "job_id, holder, epoch, expires_at, expires_at - {now}";

// Admission counts on the round's row: one more admitted update, if the round takes it (any
// round of target 0; else an open, admitting round with fewer than K). On PostgreSQL a
// concurrent admission waits for the row's lock and re-evaluates this WHERE on the row's
// latest version, so that no two admissions take the K-th place.
constexpr const char* kCountAdmission =
    "UPDATE rounds SET admitted=admitted+1 WHERE job_id=$1 AND idx=$2 AND (target=0 OR "
    "(state='open' AND admitting=1 AND admitted<target)) RETURNING admitted, target";
// The admitted update; parameters (job, round, client, meta, received_at, replica) as above.
constexpr const char* kInsertUpdate =
    "INSERT INTO updates(job_id, round_idx, client_id, meta, received_at, replica) ";

// The statements whose text depends on the dialect, rendered once, and admission's.
struct Statements {
  explicit Statements(const Dialect& d)
      : fence(render("SELECT epoch, holder FROM job_leases WHERE job_id=$1 {lock_shared}", d)),
        share_round(render(
            "SELECT state, target, admitting FROM rounds WHERE job_id=$1 AND idx=$2 {lock_shared}",
            d)),
        count_admission(kCountAdmission),
        insert_update(std::string(kInsertUpdate) + "VALUES($1, $2, $3, $4, $5, $6)"),
        // One statement: the count's row, then the update, which a duplicate's unique key
        // aborts, the count with it.
        admit(std::string("WITH r AS (") + kCountAdmission + ") " + kInsertUpdate +
              "SELECT $1, $2, $3, $4, $5, $6 FROM r RETURNING (SELECT admitted FROM r), (SELECT "
              "target FROM r)"),
        round_metrics(render("SELECT metrics FROM rounds WHERE job_id=$1 AND idx=$2 AND "
                             "state!='open' {lock_update}",
                             d)),
        acquire(
            render(std::string("UPDATE job_leases SET holder=$2, epoch=epoch+1, expires_at={now} "
                               "+ $3 WHERE job_id=$1 AND (holder='' OR holder=$2 OR "
                               "expires_at <= {now}) RETURNING ") +
                       kLeaseColumns,
                   d)),
        renew(render(std::string("UPDATE job_leases SET expires_at={now} + $4 WHERE job_id=$1 "
                                 "AND holder=$2 AND epoch=$3 RETURNING ") +
                         kLeaseColumns,
                     d)),
        release(render("UPDATE job_leases SET holder='', expires_at={now} WHERE job_id=$1 AND "
                       "holder=$2 AND epoch=$3",
                       d)),
        lease(
            render(std::string("SELECT ") + kLeaseColumns + " FROM job_leases WHERE job_id=$1", d)),
        leases(
            render(std::string("SELECT ") + kLeaseColumns + " FROM job_leases ORDER BY job_id", d)),
        charge(render(
            "INSERT INTO tenant_service(tenant_id, counter, client_seconds) VALUES($1, "
            "{greatest}($4, {greatest}(0, $2)), {greatest}(0, $3)) ON CONFLICT(tenant_id) DO "
            "UPDATE SET counter={greatest}($4, {greatest}(0, tenant_service.counter + $2)), "
            "client_seconds={greatest}(0, tenant_service.client_seconds + $3) RETURNING "
            "tenant_id, counter, client_seconds",
            d)) {}

  const std::string fence, share_round, count_admission, insert_update, admit, round_metrics,
      acquire, renew, release, lease, leases, charge;
};

// Clients whose profiles update_clients saves with one statement, at most.
constexpr size_t kProfileChunk = 128;

ClientRecord read_client(Rows& r) {
  return {r.uint64(0), r.bytes(1), r.json(2), r.json(3), r.real(4), r.real(5), r.uint64(6)};
}

JobRecord read_job(Rows& r) {
  return {r.uint64(0), r.bytes(1), r.json(2), r.job_state(3), r.json(4), r.real(5), r.uint64(6)};
}

RoundRecord read_round(Rows& r) {
  RoundRecord round;
  round.job = r.uint64(0);
  round.index = r.uint64(1);
  round.state = r.round_state(2);
  round.base_version = r.uint64(3);
  for (const json& id : r.json(4)) {
    if (id.is_number_unsigned()) round.selected.push_back(id.get<ClientId>());
  }
  round.opened_at = r.real(5);
  round.deadline = r.real(6);
  round.closed_at = r.real(7);
  round.metrics = r.json(8);
  round.target = r.uint64(9);
  round.epoch = r.uint64(10);
  round.admitting = round.state == RoundState::kOpen && r.uint64(11) != 0;
  round.plan = r.json(12);
  round.admitted = r.uint64(13);
  return round;
}

LeaseRecord read_lease(Rows& r) {
  return {r.uint64(0), r.bytes(1), r.uint64(2), r.real(3), r.real(4)};
}

// Every row of `rows`, read by `read`.
template <class Record, class Read>
Result<std::vector<Record>> all(Rows rows, Read read) {
  std::vector<Record> out;
  while (rows.next()) out.push_back(read(rows));
  FEDCASE_RETURN_IF_ERROR(rows.status());
  return out;
}

// The first row of `rows`, read by `read`; nullopt when there is none.
template <class Record, class Read>
Result<std::optional<Record>> first_if_any(Rows rows, Read read) {
  if (!rows.next()) {
    FEDCASE_RETURN_IF_ERROR(rows.status());
    return std::optional<Record>();
  }
  Record record = read(rows);
  FEDCASE_RETURN_IF_ERROR(rows.status());
  return std::optional<Record>(std::move(record));
}

// The first row of `rows`, read by `read`; `missing` when there is none.
template <class Record, class Read>
Result<Record> first(Rows rows, Read read, Status missing) {
  auto found = first_if_any<Record>(std::move(rows), read);
  if (!found.ok()) return found.status();
  if (!*found) return missing;
  return std::move(**found);
}

class SqlStore : public Store {
 public:
  SqlStore(std::unique_ptr<Driver> driver, size_t max_connections)
      : driver_(std::move(driver)), pool_(*driver_, max_connections), sql_(driver_->dialect()) {}

  // Migrates the schema to the current version, in one transaction, with other openers kept
  // out (Driver::lock_schema).
  Status migrate() {
    const std::vector<Migration>& all = migrations();
    const int current = static_cast<int>(all.size());
    for (int i = 0; i < current; ++i) {
      if (all[i].version != i + 1) return db_failed("migrations out of order");
    }
    return write(Durability::kSynced, [&](Txn& t) -> Status {
      auto found = driver_->lock_schema(t.connection());
      if (!found.ok()) return found.status();
      if (*found > current) {
        return invalid_argument("database schema version " + std::to_string(*found) +
                                " is newer than this coordinator's (" + std::to_string(current) +
                                ")");
      }
      if (*found == current) return ok_status();
      for (int v = *found; v < current; ++v) {
        Status migrated = t.connection().script(render(all[v].statements, driver_->dialect()));
        if (!migrated.ok()) {
          return Status(
              migrated.code(), migrated.message(),
              "schema migration to version " + std::to_string(v + 1) + ": " + migrated.detail());
        }
      }
      return driver_->record_schema(t.connection(), current);
    });
  }

  Result<ClientId> add_client(const ClientRecord& c) override {
    return write(Durability::kSynced, [&](Txn& t) -> Result<ClientId> {
      auto change = next_client_change(t);
      if (!change.ok()) return change.status();
      auto id =
          inserted_id(t.query("INSERT INTO clients(token_hash, info, profile, registered_at, "
                              "last_seen, change_seq) VALUES($1, $2, $3, $4, $5, $6) RETURNING id",
                              Params()
                                  .text(c.token_hash)
                                  .json(c.info)
                                  .json(c.profile)
                                  .add(c.registered_at)
                                  .add(c.last_seen)
                                  .add(*change)));
      if (!id.ok()) return conflict_as(id.status(), "another client holds that token hash");
      t.wake(Channel::kClient, *id);
      return id;
    });
  }

  Result<ClientRecord> get_client(ClientId id) override {
    return by_id<ClientRecord>(kClientColumns, "clients", id, read_client, "client");
  }

  Result<ClientRecord> find_client(const std::string& token_hash) override {
    return read([&](Connection& c) {
      return first<ClientRecord>(
          c.query(std::string("SELECT ") + kClientColumns + " FROM clients WHERE token_hash=$1",
                  Params().text(token_hash)),
          read_client, not_found("no client holds that token"));
    });
  }

  Result<std::vector<ClientRecord>> clients_changed_after(uint64_t after,
                                                          size_t limit) override {
    const uint64_t rows = std::min<uint64_t>(limit, std::numeric_limits<int64_t>::max());
    return read([&](Connection& c) {
      return all<ClientRecord>(
          c.query(std::string("SELECT ") + kClientColumns +
                      " FROM clients WHERE change_seq>$1 ORDER BY change_seq LIMIT $2",
                  Params().add(after).add(rows)),
          read_client);
    });
  }

  // One statement per chunk of up to kProfileChunk clients (a round trip each on PostgreSQL),
  // each client once, with the last of its records; then the batch, and the batches saved too
  // long before it dropped.
  Status update_clients(const std::vector<ClientRecord>& clients) override {
    std::map<ClientId, const ClientRecord*> last;
    for (const ClientRecord& c : clients) last[c.id] = &c;
    std::vector<const ClientRecord*> rows;
    for (const auto& [id, record] : last) rows.push_back(record);
    if (rows.empty()) return ok_status();
    return write(Durability::kSynced, [&](Txn& t) -> Status {
      // One save at a time, before any row is locked: two replicas saving the same clients
      // never wait on each other's rows, and the batch is numbered once no other save can
      // commit before this one.
      FEDCASE_RETURN_IF_ERROR(driver_->order_client_changes(t.connection()));
      for (size_t done = 0; done < rows.size();) {
        size_t n = kProfileChunk;  // then halves: few statement texts to prepare
        while (n > rows.size() - done) n /= 2;
        Params params;
        for (size_t i = done; i < done + n; ++i) {
          params.add(rows[i]->id).json(rows[i]->profile).add(rows[i]->last_seen);
        }
        Rows updated = t.query(profiles_update(n), params);
        FEDCASE_RETURN_IF_ERROR(updated.status());
        if (updated.changes() != n) return missing_client(t, rows, done, n);
        done += n;
      }
      Rows last_batch = t.query("SELECT COALESCE(MAX(number), 0) FROM contact_batches", Params());
      const uint64_t number = last_batch.next() ? last_batch.uint64(0) + 1 : 1;
      FEDCASE_RETURN_IF_ERROR(last_batch.status());
      nlohmann::json contacts = nlohmann::json::array();
      double saved_at = 0;
      for (const ClientRecord* c : rows) {
        contacts.push_back({c->id, c->last_seen, c->profile});
        saved_at = std::max(saved_at, c->last_seen);
      }
      FEDCASE_RETURN_IF_ERROR(
          t.query("INSERT INTO contact_batches(number, saved_at, contacts) VALUES($1, $2, $3)",
                  Params().add(number).add(saved_at).json(contacts))
              .status());
      // The other replicas read it at once rather than at their next reading: the sleep pace
      // steering told a device of reaches a job's owner before it invites the device.
      t.wake(Channel::kClient, number);
      return t.query("DELETE FROM contact_batches WHERE saved_at<$1",
                     Params().add(saved_at - kContactBatchesKeptS))
          .status();
    });
  }

  Result<std::vector<ContactBatch>> contacts_after(uint64_t after, size_t limit) override {
    const uint64_t rows = std::min<uint64_t>(limit, std::numeric_limits<int64_t>::max());
    return read([&](Connection& c) -> Result<std::vector<ContactBatch>> {
      Rows r = c.query(
          "SELECT number, saved_at, contacts FROM contact_batches WHERE number>$1 ORDER BY number "
          "LIMIT $2",
          Params().add(after).add(rows));
      std::vector<ContactBatch> out;
      while (r.next()) {
        ContactBatch batch{r.uint64(0), r.real(1), {}};
        const nlohmann::json contacts = r.json(2);
        if (!contacts.is_array()) return db_failed("a contact batch is not a list");
        for (const nlohmann::json& c : contacts) {
          if (!c.is_array() || c.size() != 3 || !c[0].is_number_unsigned() || !c[1].is_number()) {
            return db_failed("a contact batch holds a malformed contact");
          }
          ClientRecord contact;
          contact.id = c[0].get<ClientId>();
          contact.last_seen = c[1].get<double>();
          contact.profile = c[2];
          batch.contacts.push_back(std::move(contact));
        }
        out.push_back(std::move(batch));
      }
      FEDCASE_RETURN_IF_ERROR(r.status());
      return out;
    });
  }

  Result<JobId> create_job(const JobRecord& job, const ModelRecord& model,
                           const std::string& module) override {
    return write(Durability::kSynced, [&](Txn& t) -> Result<JobId> {
      auto id = inserted_id(
          t.query("INSERT INTO jobs(name, config, state, policy_state, created_at, tenant_id) "
                  "VALUES($1, $2, $3, $4, $5, $6) RETURNING id",
                  Params()
                      .text(job.name)
                      .json(job.config)
                      .text(state_name(job.state))
                      .json(job.policy_state)
                      .add(job.created_at)
                      .add(job.tenant)));
      if (!id.ok()) return id;
      ModelRecord m = model;
      m.job = *id;
      FEDCASE_RETURN_IF_ERROR(insert_model(t, m));
      if (!module.empty()) {
        FEDCASE_RETURN_IF_ERROR(t.query("INSERT INTO job_modules(job_id, module) VALUES($1, $2)",
                                        Params().add(*id).bytes(module))
                                    .status());
      }
      FEDCASE_RETURN_IF_ERROR(
          t.query("INSERT INTO job_leases(job_id) VALUES($1)", Params().add(*id)).status());
      t.wake(Channel::kJob, *id);
      return id;
    });
  }

  Result<std::string> get_job_module(JobId id) override {
    return read([&](Connection& c) {
      return first<std::string>(
          c.query("SELECT module FROM job_modules WHERE job_id=$1", Params().add(id)),
          [](Rows& r) { return r.bytes(0); },
          not_found("job " + std::to_string(id) + " has no module"));
    });
  }

  Result<JobRecord> get_job(JobId id) override {
    return by_id<JobRecord>(kJobColumns, "jobs", id, read_job, "job");
  }

  Result<std::vector<JobRecord>> list_jobs() override {
    return every<JobRecord>(kJobColumns, "jobs", read_job);
  }

  Status set_job_state(JobId id, JobState state, Epoch epoch) override {
    return write(Durability::kSynced, [&](Txn& t) -> Status {
      FEDCASE_RETURN_IF_ERROR(fence(t, id, epoch, Code::kNotFound));
      FEDCASE_RETURN_IF_ERROR(
          t.query("UPDATE jobs SET state=$1 WHERE id=$2", Params().text(state_name(state)).add(id))
              .status());
      t.wake(Channel::kJob, id);
      return ok_status();
    });
  }

  Result<TenantId> add_tenant(const TenantRecord& tenant) override {
    return write(Durability::kSynced, [&](Txn& t) -> Result<TenantId> {
      auto id =
          inserted_id(t.query("INSERT INTO tenants(name, token_hash, weight, limits, created_at) "
                              "VALUES($1, $2, $3, $4, $5) RETURNING id",
                              Params()
                                  .text(tenant.name)
                                  .text(tenant.token_hash)
                                  .add(tenant.weight)
                                  .json(tenant.limits)
                                  .add(tenant.created_at)));
      if (!id.ok()) return conflict_as(id.status(), "a tenant of that name or token hash exists");
      t.wake(Channel::kTenant, *id);
      return id;
    });
  }

  Result<std::vector<TenantRecord>> list_tenants() override {
    return every<TenantRecord>(
        "id, name, token_hash, weight, limits, created_at", "tenants", [](Rows& r) -> TenantRecord {
          return {r.uint64(0), r.bytes(1), r.bytes(2), r.real(3), r.json(4), r.real(5)};
        });
  }

  Status open_round(const RoundRecord& r) override {
    return write(Durability::kSynced, [&](Txn& t) -> Status {
      FEDCASE_RETURN_IF_ERROR(fence(t, r.job, r.epoch, Code::kConflict));
      FEDCASE_RETURN_IF_ERROR(conflict_as(
          t.query("INSERT INTO rounds(job_id, idx, state, base_version, selected, opened_at, "
                  "deadline, closed_at, metrics, target, admitting, epoch, plan) "
                  "VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 1, $11, $12)",
                  Params()
                      .add(r.job)
                      .add(r.index)
                      .text(state_name(RoundState::kOpen))
                      .add(r.base_version)
                      .json(json(r.selected))
                      .add(r.opened_at)
                      .add(r.deadline)
                      .add(r.closed_at)
                      .json(r.metrics)
                      .add(r.target)
                      .add(r.epoch)
                      .json(r.plan))
              .status(),
          "job " + std::to_string(r.job) + " already has a round " + std::to_string(r.index)));
      t.wake(Channel::kRound, r.job);
      return ok_status();
    });
  }

  // One round trip on PostgreSQL (Dialect::writable_cte), a statement outside a transaction,
  // relaxed (see Store::admit_update): commit_round and fail_round sync, and with them every
  // write before them. Only a refusal reads again, to say why.
  Result<bool> admit_update(const UpdateRecord& u) override {
    Params params;
    params.add(u.job).add(u.round).add(u.client).json(u.meta).add(u.received_at).text(u.replica);
    const Result<std::optional<Count>> counted =
        driver_->dialect().writable_cte
            ? autocommit([&](Connection& c) {
                return first_if_any<Count>(c.query(sql_.admit, params), read_count);
              })
            : write(Durability::kRelaxed, [&](Txn& t) -> Result<std::optional<Count>> {
                auto count = first_if_any<Count>(t.query(sql_.count_admission, params), read_count);
                if (count.ok() && *count) {
                  FEDCASE_RETURN_IF_ERROR(t.query(sql_.insert_update, params).status());
                }
                return count;
              });
    if (counted.ok() && *counted) {
      const bool filled = (*counted)->target > 0 && (*counted)->admitted == (*counted)->target;
      // The owner hears that the round filled. A wake-up may be lost (Listener): the admission
      // stands whatever becomes of it.
      if (filled) (void)notify(Channel::kRound, u.job);
      return filled;
    }
    if (!counted.ok() && counted.status().code() != Code::kConflict) return counted.status();
    return why_not_admitted(u, counted.ok() ? Status() : counted.status());
  }

  Status withdraw_update(JobId job, RoundIndex round, ClientId client,
                         const std::string& replica) override {
    return write(Durability::kRelaxed, [&](Txn& t) -> Status {
      Rows counted = t.query(
          "UPDATE rounds SET admitted=admitted-1 WHERE job_id=$1 AND idx=$2 AND state='open' AND "
          "admitting=1",
          Params().add(job).add(round));
      FEDCASE_RETURN_IF_ERROR(counted.status());
      if (counted.changes() == 0) {
        auto r = round_row(t.query(sql_.share_round, Params().add(job).add(round)), job, round);
        if (!r.ok()) return r.status();
        return check_admitting(job, round, true, r->open, r->admitting);
      }
      Rows withdrawn = t.query(
          "DELETE FROM updates WHERE job_id=$1 AND round_idx=$2 AND client_id=$3 AND replica=$4",
          Params().add(job).add(round).add(client).text(replica));
      FEDCASE_RETURN_IF_ERROR(withdrawn.status());
      if (withdrawn.changes() == 0) return nothing_to_withdraw(job, round, client, replica);
      return ok_status();
    });
  }

  Result<bool> has_update(JobId job, RoundIndex round, ClientId client) override {
    return read([&](Connection& c) {
      return first<bool>(
          c.query("SELECT COUNT(*) FROM updates WHERE job_id=$1 AND round_idx=$2 AND client_id=$3",
                  Params().add(job).add(round).add(client)),
          [](Rows& r) { return r.uint64(0) > 0; }, db_failed("a count returned nothing"));
    });
  }

  Status close_admission(JobId job, RoundIndex round, Epoch epoch) override {
    return write(Durability::kSynced, [&](Txn& t) -> Status {
      FEDCASE_RETURN_IF_ERROR(fence(t, job, epoch, Code::kConflict));
      Rows closed = t.query(
          "UPDATE rounds SET admitting=0, epoch=$1 WHERE job_id=$2 AND idx=$3 AND state='open'",
          Params().add(epoch).add(job).add(round));
      FEDCASE_RETURN_IF_ERROR(closed.status());
      if (closed.changes() == 0) return conflict(round_name(job, round) + " is not open");
      t.wake(Channel::kRound, job);
      return ok_status();
    });
  }

  // One statement, so that the round and its updates are read as of one moment.
  Result<AdmissionRecord> round_admission(JobId job, RoundIndex round) override {
    return read([&](Connection& c) -> Result<AdmissionRecord> {
      Rows rows = c.query(
          "SELECT r.target, r.state='open' AND r.admitting=1, COALESCE(u.replica, ''), "
          "COUNT(u.client_id) FROM rounds r LEFT JOIN updates u ON u.job_id=r.job_id AND "
          "u.round_idx=r.idx WHERE r.job_id=$1 AND r.idx=$2 GROUP BY r.target, r.state, "
          "r.admitting, u.replica",
          Params().add(job).add(round));
      std::optional<AdmissionRecord> admission;
      while (rows.next()) {
        if (!admission) admission = AdmissionRecord{rows.uint64(0), rows.int64(1) != 0, {}};
        if (const uint64_t n = rows.uint64(3); n > 0) admission->replicas[rows.bytes(2)] = n;
      }
      FEDCASE_RETURN_IF_ERROR(rows.status());
      if (!admission) return not_found(round_name(job, round) + " not found");
      return *admission;
    });
  }

  Status put_partial(const PartialRecord& p) override {
    return write(Durability::kRelaxed, [&](Txn& t) -> Status {
      // The round's row, shared-locked: neither an admission nor a withdrawal changes it until
      // the commit (neither would land anyway once admission closed).
      auto r =
          round_row(t.query(sql_.share_round, Params().add(p.job).add(p.round)), p.job, p.round);
      if (!r.ok() && r.status().code() != Code::kConflict) return r.status();
      auto admitted = first<uint64_t>(
          t.query("SELECT COUNT(*) FROM updates WHERE job_id=$1 AND round_idx=$2 AND replica=$3",
                  Params().add(p.job).add(p.round).text(p.replica)),
          [](Rows& rows) { return rows.uint64(0); }, db_failed("a count returned nothing"));
      if (!admitted.ok()) return admitted.status();
      FEDCASE_RETURN_IF_ERROR(
          check_partial(p, r.ok(), r.ok() && r->open, r.ok() && r->admitting, *admitted));
      FEDCASE_RETURN_IF_ERROR(conflict_as(
          t.query("INSERT INTO partials(job_id, round_idx, replica, sum, weight, updates, "
                  "written_at) VALUES($1, $2, $3, $4, $5, $6, $7)",
                  Params()
                      .add(p.job)
                      .add(p.round)
                      .text(p.replica)
                      .bytes(p.sum)
                      .add(p.weight)
                      .add(p.updates)
                      .add(p.written_at))
              .status(),
          "the replica already has a partial in " + round_name(p.job, p.round)));
      t.wake(Channel::kRound, p.job);
      return ok_status();
    });
  }

  Result<std::vector<PartialRecord>> list_partials(JobId job, RoundIndex round) override {
    return read([&](Connection& c) {
      return all<PartialRecord>(
          c.query("SELECT replica, sum, weight, updates, written_at FROM partials WHERE "
                  "job_id=$1 AND round_idx=$2 ORDER BY replica",
                  Params().add(job).add(round)),
          [&](Rows& r) -> PartialRecord {
            return {job, round, r.bytes(0), r.bytes(1), r.real(2), r.uint64(3), r.real(4)};
          });
    });
  }

  Status put_stage_messages(const std::vector<StageMessage>& messages) override {
    FEDCASE_RETURN_IF_ERROR(check_stage_kinds(messages));
    if (messages.empty()) return ok_status();
    return write(Durability::kRelaxed, [&](Txn& t) -> Status {
      std::set<std::pair<JobId, RoundIndex>> woken;
      for (const StageMessage& m : messages) {
        auto r = round_row(t.query(sql_.share_round, Params().add(m.job).add(m.round)), m.job,
                           m.round);
        if (!r.ok()) return r.status();
        if (!r->open) return conflict(round_name(m.job, m.round) + " is not open");
        Rows inserted = t.query(
            "INSERT INTO stage_messages(job_id, round_idx, kind, client_id, body) VALUES($1, $2, "
            "$3, $4, $5) ON CONFLICT DO NOTHING",
            Params().add(m.job).add(m.round).text(m.kind).add(m.client).text(m.body));
        FEDCASE_RETURN_IF_ERROR(inserted.status());
        if (inserted.changes() == 0) {
          return conflict("client " + std::to_string(m.client) + " already has a '" + m.kind +
                          "' message in " + round_name(m.job, m.round));
        }
        woken.insert({m.job, m.round});
      }
      for (const auto& [job, round] : woken) t.wake(Channel::kRound, job);
      return ok_status();
    });
  }

  Result<std::vector<StageMessage>> list_stage_messages(JobId job, RoundIndex round,
                                                        const std::string& kind) override {
    return read([&](Connection& c) {
      return all<StageMessage>(
          c.query("SELECT client_id, body FROM stage_messages WHERE job_id=$1 AND round_idx=$2 "
                  "AND kind=$3 ORDER BY client_id",
                  Params().add(job).add(round).text(kind)),
          [&](Rows& r) -> StageMessage {
            return {job, round, kind, static_cast<ClientId>(r.uint64(0)), r.bytes(1)};
          });
    });
  }

  Status put_used_keys(JobId job, RoundIndex round, const std::set<std::string>& keys,
                       uint64_t keep_rounds) override {
    return write(Durability::kSynced, [&](Txn& t) -> Status {
      for (const std::string& key : keys) {
        FEDCASE_RETURN_IF_ERROR(
            t.query("INSERT INTO used_keys(job_id, round_idx, public_key) VALUES($1, $2, $3) "
                    "ON CONFLICT DO NOTHING",
                    Params().add(job).add(round).bytes(key))
                .status());
      }
      if (round > keep_rounds) {
        FEDCASE_RETURN_IF_ERROR(
            t.query("DELETE FROM used_keys WHERE job_id=$1 AND round_idx<$2",
                    Params().add(job).add(round - keep_rounds))
                .status());
      }
      return ok_status();
    });
  }

  Result<std::set<std::string>> list_used_keys(JobId job) override {
    return read([&](Connection& c) -> Result<std::set<std::string>> {
      Rows rows = c.query("SELECT public_key FROM used_keys WHERE job_id=$1", Params().add(job));
      std::set<std::string> out;
      while (rows.next()) out.insert(rows.bytes(0));
      FEDCASE_RETURN_IF_ERROR(rows.status());
      return out;
    });
  }

  Result<UploadRecord> open_upload(const UploadRecord& u) override {
    return write(Durability::kRelaxed, [&](Txn& t) -> Result<UploadRecord> {
      auto r = round_row(t.query(sql_.share_round, Params().add(u.job).add(u.round)), u.job,
                         u.round);
      if (!r.ok()) return r.status();
      if (!r->open) return conflict(round_name(u.job, u.round) + " is not open");
      auto held = all<UploadRecord>(
          t.query(std::string("SELECT ") + kUploadColumns +
                      " FROM uploads WHERE job_id=$1 AND round_idx=$2 AND client_id=$3",
                  Params().add(u.job).add(u.round).add(u.client)),
          [&](Rows& rows) { return read_upload(rows, u.job, u.round); });
      if (!held.ok()) return held.status();
      for (const UploadRecord& same : *held) {
        if (same.bytes == u.bytes && same.chunk_bytes == u.chunk_bytes && same.sha256 == u.sha256)
          return same;
        FEDCASE_RETURN_IF_ERROR(delete_upload(t, u.job, u.round, same.id));
      }
      FEDCASE_RETURN_IF_ERROR(conflict_as(
          t.query("INSERT INTO uploads(job_id, round_idx, id, client_id, bytes, chunk_bytes, "
                  "sha256, meta) VALUES($1, $2, $3, $4, $5, $6, $7, $8)",
                  Params()
                      .add(u.job)
                      .add(u.round)
                      .text(u.id)
                      .add(u.client)
                      .add(u.bytes)
                      .add(u.chunk_bytes)
                      .text(u.sha256)
                      .json(u.meta))
              .status(),
          "upload " + u.id + " exists in " + round_name(u.job, u.round)));
      UploadRecord opened = u;
      opened.chunks = 0;
      opened.seconds = 0;
      return opened;
    });
  }

  Result<UploadRecord> get_upload(JobId job, RoundIndex round, const std::string& id) override {
    return read([&](Connection& c) { return find_upload(c, job, round, id); });
  }

  Status put_upload_chunk(JobId job, RoundIndex round, const std::string& id, uint64_t index,
                          std::string_view bytes, double seconds) override {
    return write(Durability::kRelaxed, [&](Txn& t) -> Status {
      // Counted only if it is the next chunk: chunks of one upload are stored one at a time.
      Rows counted = t.query(
          "UPDATE uploads SET chunks=chunks+1, seconds=seconds+$5 WHERE job_id=$1 AND "
          "round_idx=$2 AND id=$3 AND chunks=$4",
          Params().add(job).add(round).text(id).add(index).add(seconds));
      FEDCASE_RETURN_IF_ERROR(counted.status());
      if (counted.changes() == 0) {
        auto upload = find_upload(t, job, round, id);
        return upload.ok() ? next_chunk_expected(id, upload->chunks) : upload.status();
      }
      return t
          .query("INSERT INTO upload_chunks(job_id, round_idx, upload_id, idx, data) "
                 "VALUES($1, $2, $3, $4, $5)",
                 Params().add(job).add(round).text(id).add(index).bytes(bytes))
          .status();
    });
  }

  Result<std::string> get_upload_chunk(JobId job, RoundIndex round, const std::string& id,
                                       uint64_t index) override {
    return read([&](Connection& c) {
      return first<std::string>(
          c.query("SELECT data FROM upload_chunks WHERE job_id=$1 AND round_idx=$2 AND "
                  "upload_id=$3 AND idx=$4",
                  Params().add(job).add(round).text(id).add(index)),
          [](Rows& rows) { return rows.bytes(0); }, chunk_not_stored(id, index));
    });
  }

  Status drop_upload(JobId job, RoundIndex round, const std::string& id) override {
    return write(Durability::kRelaxed,
                 [&](Txn& t) -> Status { return delete_upload(t, job, round, id); });
  }

  Status commit_round(const RoundRecord& r, const ModelRecord& model,
                      const json& policy_state) override {
    return write(Durability::kSynced, [&](Txn& t) -> Status {
      FEDCASE_RETURN_IF_ERROR(conclude(t, r, RoundState::kCommitted));
      FEDCASE_RETURN_IF_ERROR(conflict_as(insert_model(t, model),
                                          "model " + std::to_string(model.version) + " of job " +
                                              std::to_string(model.job) + " is already stored"));
      return t
          .query("UPDATE jobs SET policy_state=$1 WHERE id=$2",
                 Params().json(policy_state).add(r.job))
          .status();
    });
  }

  Status fail_round(const RoundRecord& r) override {
    return write(Durability::kSynced,
                 [&](Txn& t) -> Status { return conclude(t, r, RoundState::kFailed); });
  }

  Status add_round_metrics(JobId job, RoundIndex round, const json& metrics) override {
    return write(Durability::kSynced, [&](Txn& t) -> Status {
      auto merged = first<json>(
          t.query(sql_.round_metrics, Params().add(job).add(round)),
          [](Rows& r) { return r.json(0); },
          not_found("closed " + round_name(job, round) + " not found"));
      if (!merged.ok()) return merged.status();
      merged->update(metrics);
      return t
          .query("UPDATE rounds SET metrics=$1 WHERE job_id=$2 AND idx=$3",
                 Params().json(*merged).add(job).add(round))
          .status();
    });
  }

  Result<std::vector<RoundRecord>> list_rounds(JobId job) override {
    return read([&](Connection& c) {
      return all<RoundRecord>(c.query(std::string("SELECT ") + kRoundColumns +
                                          " FROM rounds WHERE job_id=$1 ORDER BY idx",
                                      Params().add(job)),
                              read_round);
    });
  }

  Result<std::vector<UpdateRecord>> list_updates(JobId job, RoundIndex round) override {
    return read([&](Connection& c) {
      return all<UpdateRecord>(
          c.query("SELECT client_id, meta, received_at, replica FROM updates WHERE job_id=$1 AND "
                  "round_idx=$2 ORDER BY received_at",
                  Params().add(job).add(round)),
          [&](Rows& r) -> UpdateRecord {
            return {job, round, r.uint64(0), r.json(1), r.real(2), r.bytes(3)};
          });
    });
  }

  // Relaxed: a plan lost in a crash goes with its round, which the next start fails.
  Status update_round_plan(JobId job, RoundIndex round, const json& plan, Epoch epoch) override {
    return write(Durability::kRelaxed, [&](Txn& t) -> Status {
      FEDCASE_RETURN_IF_ERROR(fence(t, job, epoch, Code::kConflict));
      Rows planned =
          t.query("UPDATE rounds SET plan=$1, epoch=$2 WHERE job_id=$3 AND idx=$4 AND state='open'",
                  Params().json(plan).add(epoch).add(job).add(round));
      FEDCASE_RETURN_IF_ERROR(planned.status());
      if (planned.changes() == 0) return conflict(round_name(job, round) + " is not open");
      t.wake(Channel::kRound, job);
      return ok_status();
    });
  }

  Result<ModelRecord> get_model(JobId job, uint64_t version) override {
    return read([&](Connection& c) -> Result<ModelRecord> {
      auto model = first<ModelRecord>(
          c.query(std::string("SELECT ") + kModelColumns +
                      " FROM models WHERE job_id=$1 AND version=$2",
                  Params().add(job).add(version)),
          [&](Rows& r) { return read_model(r, job); },
          not_found("model " + std::to_string(version) + " of job " + std::to_string(job) +
                    " not found"));
      if (!model.ok()) return model;
      FEDCASE_RETURN_IF_ERROR(read_model_pieces(c, *model));
      return model;
    });
  }

  Result<ModelRecord> latest_model(JobId job) override {
    return read([&](Connection& c) -> Result<ModelRecord> {
      auto model = first<ModelRecord>(
          c.query(std::string("SELECT ") + kModelColumns +
                      " FROM models WHERE job_id=$1 ORDER BY version DESC LIMIT 1",
                  Params().add(job)),
          [&](Rows& r) { return read_model(r, job); },
          not_found("model of job " + std::to_string(job) + " not found"));
      if (!model.ok()) return model;
      FEDCASE_RETURN_IF_ERROR(read_model_pieces(c, *model));
      return model;
    });
  }

  Result<LeaseRecord> acquire_lease(JobId job, const std::string& holder,
                                    double duration_s) override {
    FEDCASE_RETURN_IF_ERROR(check_lease_request(holder, duration_s));
    // Synced: an acquisition lost in a crash could hand its epoch out a second time.
    return write(Durability::kSynced, [&](Txn& t) -> Result<LeaseRecord> {
      auto lease = changed_lease(
          t, job, t.query(sql_.acquire, Params().add(job).text(holder).add(duration_s)));
      if (lease.ok()) t.wake(Channel::kLease, job);
      return lease;
    });
  }

  Result<LeaseRecord> renew_lease(JobId job, const std::string& holder, Epoch epoch,
                                  double duration_s) override {
    FEDCASE_RETURN_IF_ERROR(check_lease_request(holder, duration_s));
    // Relaxed: a renewal lost in a crash only ends the lease sooner; its epoch stays.
    return write(Durability::kRelaxed, [&](Txn& t) -> Result<LeaseRecord> {
      return changed_lease(
          t, job, t.query(sql_.renew, Params().add(job).text(holder).add(epoch).add(duration_s)));
    });
  }

  Status release_lease(JobId job, const std::string& holder, Epoch epoch) override {
    return write(Durability::kRelaxed, [&](Txn& t) -> Status {
      Rows released = t.query(sql_.release, Params().add(job).text(holder).add(epoch));
      FEDCASE_RETURN_IF_ERROR(released.status());
      if (released.changes() == 0) return lease_refusal(t, job);
      t.wake(Channel::kLease, job);
      return ok_status();
    });
  }

  Result<std::vector<LeaseRecord>> list_leases() override {
    return read([&](Connection& c) {
      return all<LeaseRecord>(c.query(sql_.leases, Params()), read_lease);
    });
  }

  Result<TenantService> charge_tenant(const ServiceCharge& charge) override {
    // Relaxed: the counters steer who goes first; a crash losing the last charges is harmless.
    return write(Durability::kRelaxed, [&](Txn& t) -> Result<TenantService> {
      return first<TenantService>(t.query(sql_.charge, Params()
                                                           .add(charge.tenant)
                                                           .add(charge.counter)
                                                           .add(charge.client_seconds)
                                                           .add(charge.counter_at_least)),
                                  read_service, db_failed("a charge returned nothing"));
    });
  }

  Result<std::vector<TenantService>> list_tenant_service() override {
    return read([&](Connection& c) {
      return all<TenantService>(
          c.query("SELECT tenant_id, counter, client_seconds FROM tenant_service ORDER BY "
                  "tenant_id",
                  Params()),
          read_service);
    });
  }

  Status notify(Channel channel, uint64_t id) override {
    return write(Durability::kRelaxed, [&](Txn& t) -> Status {
      t.wake(channel, id);
      return ok_status();
    });
  }

  Result<std::unique_ptr<Listener>> listen() override { return driver_->listen(); }

  Status ping() override {
    return read([](Connection& c) -> Status {
      Rows rows = c.query("SELECT 1", Params());
      rows.next();
      return rows.status();
    });
  }

 private:
  // Runs `body` on a connection, outside a transaction: one statement sees one committed
  // state. A connection found lost is replaced and the call retried once (a read changes
  // nothing).
  template <class Body>
  auto read(Body body) -> decltype(body(std::declval<Connection&>())) {
    using R = decltype(body(std::declval<Connection&>()));
    for (int attempt = 0;; ++attempt) {
      auto taken = pool_.take();
      if (!taken.ok()) return R(taken.status());
      Borrowed c(pool_, std::move(taken).value());
      R result = body(*c);
      if (!status_of(result).ok() && c->lost() && attempt == 0) continue;
      return result;
    }
  }

  // Runs `body`, one write statement, on a connection outside a transaction, where it commits
  // on its own. A connection found closed before the statement (Connection::check) is
  // replaced and the call retried once: nothing reached the database. One lost during the
  // statement leaves its outcome unknown (commit_outcome_unknown).
  template <class Body>
  auto autocommit(Body body) -> decltype(body(std::declval<Connection&>())) {
    using R = decltype(body(std::declval<Connection&>()));
    for (int attempt = 0;; ++attempt) {
      auto taken = pool_.take();
      if (!taken.ok()) return R(taken.status());
      Borrowed c(pool_, std::move(taken).value());
      Status open = c->check();
      if (!open.ok()) {
        if (attempt == 0) continue;
        return R(open);
      }
      R result = body(*c);
      if (!status_of(result).ok() && c->lost()) return R(commit_outcome_unknown(status_of(result)));
      return result;
    }
  }

  // Runs `body` in a transaction, committed if it returns OK and rolled back otherwise. If
  // the transaction cannot begin because the connection is lost, nothing reached the
  // database, and the call is retried once on a new connection.
  template <class Body>
  auto write(Durability durability, Body body) -> decltype(body(std::declval<Txn&>())) {
    using R = decltype(body(std::declval<Txn&>()));
    for (int attempt = 0;; ++attempt) {
      auto taken = pool_.take();
      if (!taken.ok()) return R(taken.status());
      Borrowed c(pool_, std::move(taken).value());
      Status began = c->begin(durability);
      if (!began.ok()) {
        if (c->lost() && attempt == 0) continue;
        return R(began);
      }
      Txn txn(*c);
      R result = body(txn);
      if (!status_of(result).ok()) {
        c->rollback();
        return result;
      }
      Status committed = c->commit(txn.wakeups());
      if (committed.ok()) return result;
      c->rollback();
      return R(committed);
    }
  }

  // The row of `table` whose id is `id`; kNotFound naming it `what` when there is none.
  template <class Record, class Read>
  Result<Record> by_id(const char* columns, const char* table, uint64_t id, Read reader,
                       const char* what) {
    return read([&](Connection& c) {
      return first<Record>(
          c.query(std::string("SELECT ") + columns + " FROM " + table + " WHERE id=$1",
                  Params().add(id)),
          reader, not_found(what + (" " + std::to_string(id)) + " not found"));
    });
  }

  // Every row of `table`, by id.
  template <class Record, class Read>
  Result<std::vector<Record>> every(const char* columns, const char* table, Read reader) {
    return read([&](Connection& c) {
      return all<Record>(
          c.query(std::string("SELECT ") + columns + " FROM " + table + " ORDER BY id", Params()),
          reader);
    });
  }

  // UPDATE of `n` clients' profiles and last_seen, from parameters (id, profile,
  // last_seen)...
  static std::string profiles_update(size_t n) {
    std::string values;
    for (size_t i = 0; i < n; ++i) {
      values += i ? ", (" : "(";
      for (size_t column = 1; column <= 3; ++column) {
        values += (column > 1 ? ", $" : "$") + std::to_string(3 * i + column);
      }
      values += ")";
    }
    return "UPDATE clients SET profile=v.column2, last_seen=v.column3 "
           "FROM (VALUES " + values + ") AS v WHERE clients.id=v.column1";
  }

  // The number the transaction's first change of a client takes (the next ones follow it),
  // once no other transaction that changes clients can commit before this one.
  Result<uint64_t> next_client_change(Txn& t) {
    FEDCASE_RETURN_IF_ERROR(driver_->order_client_changes(t.connection()));
    Rows last = t.query("SELECT COALESCE(MAX(change_seq), 0) FROM clients", Params());
    const uint64_t number = last.next() ? last.uint64(0) + 1 : 1;
    FEDCASE_RETURN_IF_ERROR(last.status());
    return number;
  }

  // kNotFound naming the first of rows[done, done + n) that the store does not hold.
  Status missing_client(Txn& t, const std::vector<const ClientRecord*>& rows, size_t done,
                        size_t n) {
    for (size_t i = done; i < done + n; ++i) {
      Rows found = t.query("SELECT id FROM clients WHERE id=$1", Params().add(rows[i]->id));
      if (!found.next()) {
        FEDCASE_RETURN_IF_ERROR(found.status());
        return not_found("client " + std::to_string(rows[i]->id) + " not found");
      }
    }
    return db_failed("a batch of profiles was not saved whole");
  }

  static Result<uint64_t> inserted_id(Rows rows) {
    return first<uint64_t>(
        std::move(rows), [](Rows& r) { return r.uint64(0); },
        db_failed("an insert returned no id"));
  }

  static ModelRecord read_model(Rows& r, JobId job) {
    return {job, r.uint64(0), r.bytes(1), r.bytes(2), r.bytes(3), r.real(4)};
  }

  static TenantService read_service(Rows& r) { return {r.uint64(0), r.real(1), r.real(2)}; }

  // A model's blob is stored in pieces of kModelPiece bytes, each piece once by its SHA-256
  // (model_chunks) and each version as the list of its pieces (model_pieces), so that what a
  // version shares with earlier ones (the frozen tensors of a job that trains part of its
  // model) is stored once, and no value comes near the databases' 1 GB limit. models.blob is
  // left empty (a blob is never empty): rows written before the pieces hold their whole blob.
  static Status insert_model(Txn& t, const ModelRecord& m) {
    FEDCASE_RETURN_IF_ERROR(
        t.query("INSERT INTO models(job_id, version, blob, checksum, optimizer_state, "
                "created_at) VALUES($1, $2, $3, $4, $5, $6)",
                Params()
                    .add(m.job)
                    .add(m.version)
                    .bytes("")
                    .text(m.checksum)
                    .bytes(m.optimizer_state)
                    .add(m.created_at))
            .status());
    const std::string_view blob = m.blob;
    for (size_t idx = 0; idx * kModelPiece < blob.size(); ++idx) {
      const std::string_view piece = blob.substr(idx * kModelPiece, kModelPiece);
      const std::string digest = sha256_hex(piece);
      FEDCASE_RETURN_IF_ERROR(
          t.query("INSERT INTO model_chunks(sha256, data) VALUES($1, $2) ON CONFLICT DO NOTHING",
                  Params().text(digest).bytes(piece))
              .status());
      FEDCASE_RETURN_IF_ERROR(
          t.query("INSERT INTO model_pieces(job_id, version, idx, chunk) VALUES($1, $2, $3, $4)",
                  Params().add(m.job).add(m.version).add(idx).text(digest))
              .status());
    }
    return ok_status();
  }

  // Fills in the blob of `model`, read from models, from its pieces (insert_model).
  static Status read_model_pieces(Connection& c, ModelRecord& model) {
    if (!model.blob.empty()) return ok_status();  // written before the pieces
    const Params key = Params().add(model.job).add(model.version);
    auto bytes = first<uint64_t>(
        c.query("SELECT COALESCE(SUM(length(c.data)), 0) FROM model_pieces p JOIN model_chunks c "
                "ON c.sha256=p.chunk WHERE p.job_id=$1 AND p.version=$2",
                key),
        [](Rows& r) { return r.uint64(0); }, db_failed("a sum returned nothing"));
    if (!bytes.ok()) return bytes.status();
    model.blob.reserve(*bytes);
    Rows pieces = c.query(
        "SELECT c.data FROM model_pieces p JOIN model_chunks c ON c.sha256=p.chunk WHERE "
        "p.job_id=$1 AND p.version=$2 ORDER BY p.idx",
        key);
    while (pieces.next()) model.blob += pieces.bytes(0);
    FEDCASE_RETURN_IF_ERROR(pieces.status());
    if (model.blob.size() != *bytes || model.blob.empty()) {
      return db_failed("model " + std::to_string(model.version) + " of job " +
                       std::to_string(model.job) + " has missing pieces");
    }
    return ok_status();
  }

  // Refuses the transaction's write unless `epoch` is the job's lease epoch, and keeps the
  // lease from changing until the transaction ends. `missing`: the error for an unknown job.
  Status fence(Txn& t, JobId job, Epoch epoch, Code missing) {
    Rows lease = t.query(sql_.fence, Params().add(job));
    if (!lease.next()) {
      FEDCASE_RETURN_IF_ERROR(lease.status());
      return Status(missing, "job " + std::to_string(job) + " not found");
    }
    const Epoch current = lease.uint64(0);
    const std::string holder = lease.bytes(1);
    FEDCASE_RETURN_IF_ERROR(lease.status());
    return check_epoch(job, epoch, current, holder);
  }

  // The round's (state, target, admitting), as share_round reads them.
  struct RoundAdmission {
    bool open = false;
    uint64_t target = 0;
    bool admitting = false;
  };
  static Result<RoundAdmission> round_row(Rows rows, JobId job, RoundIndex round) {
    return first<RoundAdmission>(
        std::move(rows),
        [](Rows& r) -> RoundAdmission {
          return {r.round_state(0) == RoundState::kOpen, r.uint64(1), r.int64(2) != 0};
        },
        conflict(round_name(job, round) + " not found"));
  }

  // What an admission's count returned: the round's admitted updates, this one included, and
  // its target.
  struct Count {
    uint64_t admitted = 0, target = 0;
  };
  static Count read_count(Rows& r) { return {r.uint64(0), r.uint64(1)}; }

  // Why admit_update stored nothing (check_admission), read after its statement: `error` is
  // the statement's own (a constraint), or OK when the round's count took nothing. A refusal
  // that no longer holds when it is read (the round changed since) is said as such.
  Status why_not_admitted(const UpdateRecord& u, const Status& error) {
    auto facts = read([&](Connection& c) {
      return first_if_any<AdmissionFacts>(
          c.query("SELECT state, target, admitting, admitted, (SELECT COUNT(*) FROM updates "
                  "WHERE job_id=$1 AND round_idx=$2 AND client_id=$3), (SELECT COUNT(*) FROM "
                  "clients WHERE id=$3) FROM rounds WHERE job_id=$1 AND idx=$2",
                  Params().add(u.job).add(u.round).add(u.client)),
          [](Rows& r) -> AdmissionFacts {
            return {true,        r.round_state(0), r.uint64(1),    r.int64(2) != 0,
                    r.uint64(3), r.uint64(4) > 0,  r.uint64(5) > 0};
          });
    });
    if (!facts.ok()) return facts.status();
    FEDCASE_RETURN_IF_ERROR(
        check_admission(u.job, u.round, u.client, facts->value_or(AdmissionFacts{})));
    return Status(Code::kConflict,
                  "the update of client " + std::to_string(u.client) + " was not admitted to " +
                      round_name(u.job, u.round) + " as the round stood then: try again",
                  error.detail());
  }

  // Drops an upload session and its chunks.
  static Status delete_upload(Txn& t, JobId job, RoundIndex round, const std::string& id) {
    FEDCASE_RETURN_IF_ERROR(
        t.query("DELETE FROM upload_chunks WHERE job_id=$1 AND round_idx=$2 AND upload_id=$3",
                Params().add(job).add(round).text(id))
            .status());
    return t
        .query("DELETE FROM uploads WHERE job_id=$1 AND round_idx=$2 AND id=$3",
               Params().add(job).add(round).text(id))
        .status();
  }

  static UploadRecord read_upload(Rows& r, JobId job, RoundIndex round) {
    return {job,         round,      r.bytes(0), r.uint64(1), r.uint64(2),
            r.uint64(3), r.bytes(4), r.json(5),  r.uint64(6), r.real(7)};
  }

  template <class Session>
  static Result<UploadRecord> find_upload(Session& c, JobId job, RoundIndex round,
                                          const std::string& id) {
    return first<UploadRecord>(
        c.query(std::string("SELECT ") + kUploadColumns +
                    " FROM uploads WHERE job_id=$1 AND round_idx=$2 AND id=$3",
                Params().add(job).add(round).text(id)),
        [&](Rows& rows) { return read_upload(rows, job, round); },
        upload_not_found(job, round, id));
  }

  // Concludes the round as `state` (committed or failed), at the writer's epoch, and drops
  // what its admission left: partials, stage messages and uploads.
  Status conclude(Txn& t, const RoundRecord& r, RoundState state) {
    FEDCASE_RETURN_IF_ERROR(fence(t, r.job, r.epoch, Code::kConflict));
    Rows closed = t.query(
        "UPDATE rounds SET state=$1, closed_at=$2, metrics=$3, admitting=0, epoch=$4 WHERE "
        "job_id=$5 AND idx=$6 AND state='open'",
        Params()
            .text(state_name(state))
            .add(r.closed_at)
            .json(r.metrics)
            .add(r.epoch)
            .add(r.job)
            .add(r.index));
    FEDCASE_RETURN_IF_ERROR(closed.status());
    if (closed.changes() == 0) return conflict(round_name(r.job, r.index) + " is not open");
    FEDCASE_RETURN_IF_ERROR(t.query("DELETE FROM partials WHERE job_id=$1 AND round_idx=$2",
                                    Params().add(r.job).add(r.index))
                                .status());
    for (const char* table : {"stage_messages", "upload_chunks", "uploads"}) {
      FEDCASE_RETURN_IF_ERROR(t.query(std::string("DELETE FROM ") + table +
                                          " WHERE job_id=$1 AND round_idx=$2",
                                      Params().add(r.job).add(r.index))
                                  .status());
    }
    t.wake(Channel::kRound, r.job);
    return ok_status();
  }

  // The lease an acquisition or renewal returned, or why it changed none.
  Result<LeaseRecord> changed_lease(Txn& t, JobId job, Rows changed) {
    if (changed.next()) {
      LeaseRecord lease = read_lease(changed);
      FEDCASE_RETURN_IF_ERROR(changed.status());
      return lease;
    }
    FEDCASE_RETURN_IF_ERROR(changed.status());
    return lease_refusal(t, job);
  }

  // Why a lease change was refused: the lease as it stands.
  Status lease_refusal(Txn& t, JobId job) {
    auto lease = first<LeaseRecord>(t.query(sql_.lease, Params().add(job)), read_lease,
                                    not_found("job " + std::to_string(job) + " not found"));
    if (!lease.ok()) return lease.status();
    return lease_refused(*lease);
  }

  std::unique_ptr<Driver> driver_;
  Pool pool_;
  const Statements sql_;
};

}  // namespace

Result<std::unique_ptr<Store>> open_sql_store(std::unique_ptr<Driver> driver,
                                              size_t max_connections) {
  auto store = std::make_unique<SqlStore>(std::move(driver), max_connections);
  FEDCASE_RETURN_IF_ERROR(store->migrate());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace sql
}  // namespace fedcase::storage
