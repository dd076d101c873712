// The Store contract's cases of what coordinator replicas share through the database: leases
// and their epochs, fenced writes (also against an acquisition racing a commit), admission
// (K updates, once per client, withdrawals, replicas racing for places), partial
// aggregates, tenants' service counters, wake-ups, and several openers migrating one empty
// database at once. Every case runs on every backend; "replicas" are stores opened on the
// same database.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "tests/storage/contract_records.h"

namespace fedcase::storage::contract {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

RoundRecord at_epoch(RoundRecord round, Epoch epoch) {
  round.epoch = epoch;
  return round;
}

RoundRecord with_target(RoundRecord round, uint64_t target) {
  round.target = target;
  return round;
}

LeaseRecord lease_of(Store& store, JobId job) {
  auto leases = store.list_leases();
  REQUIRE_MESSAGE(leases.ok(), leases.status().to_string());
  for (const LeaseRecord& l : *leases) {
    if (l.job == job) return l;
  }
  FAIL("job " << job << " has no lease");
  return {};
}

std::array<ClientId, 4> four_clients(Store& store) {
  return {add(store, "hash-a"), add(store, "hash-b"), add(store, "hash-c"), add(store, "hash-d")};
}

// Polls `done` every 20 ms until it holds; false if `timeout_s` passes first.
bool eventually(const std::function<bool()>& done, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void leases(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  const JobId job = create(*store, job_record("j"));
  const JobId other = create(*store, job_record("other"));
  auto listed = store->list_leases();
  REQUIRE(listed.ok());
  REQUIRE(listed->size() == 2);
  CHECK(listed->at(0).job == job);
  CHECK(listed->at(1).job == other);
  CHECK(listed->at(0).epoch == kUnleased);
  CHECK(listed->at(0).holder.empty());
  CHECK_FALSE(listed->at(0).held());

  auto a = store->acquire_lease(job, "replica-a", 30);
  REQUIRE_MESSAGE(a.ok(), a.status().to_string());
  CHECK(a->job == job);
  CHECK(a->epoch == 1);
  CHECK(a->holder == "replica-a");
  CHECK(a->remaining_s > 29);
  CHECK(a->remaining_s <= 30);
  CHECK(a->held());
  // Another holder is refused while the lease runs; the holder re-acquires at a new epoch.
  auto refused = store->acquire_lease(job, "replica-b", 30);
  CHECK(refused.status().code() == Code::kConflict);
  CHECK(refused.status().message().find("replica-a") == std::string::npos);  // the holder: in
  CHECK(refused.status().detail().find("replica-a") != std::string::npos);   // the detail only
  auto again = store->acquire_lease(job, "replica-a", 30);
  REQUIRE(again.ok());
  CHECK(again->epoch == 2);
  // Renewals: by the holder at the current epoch only.
  auto renewed = store->renew_lease(job, "replica-a", 2, 60);
  REQUIRE_MESSAGE(renewed.ok(), renewed.status().to_string());
  CHECK(renewed->epoch == 2);
  CHECK(renewed->remaining_s > 59);
  CHECK(store->renew_lease(job, "replica-a", 1, 60).status().code() == Code::kConflict);
  CHECK(store->renew_lease(job, "replica-b", 2, 60).status().code() == Code::kConflict);
  CHECK(lease_of(*store, job).remaining_s > 59);
  // A release ends the lease and keeps its epoch; the next acquisition increments it.
  CHECK(store->release_lease(job, "replica-b", 2).code() == Code::kConflict);
  CHECK(store->release_lease(job, "replica-a", 1).code() == Code::kConflict);
  REQUIRE(store->release_lease(job, "replica-a", 2).ok());
  const LeaseRecord released = lease_of(*store, job);
  CHECK(released.holder.empty());
  CHECK(released.epoch == 2);
  CHECK_FALSE(released.held());
  CHECK(store->renew_lease(job, "replica-a", 2, 60).status().code() == Code::kConflict);
  auto b = store->acquire_lease(job, "replica-b", 30);
  REQUIRE(b.ok());
  CHECK(b->epoch == 3);
  CHECK(lease_of(*store, other).epoch == kUnleased);  // leases are per job

  CHECK(store->acquire_lease(other + 100, "replica-a", 30).status().code() == Code::kNotFound);
  CHECK(store->renew_lease(other + 100, "replica-a", 1, 30).status().code() == Code::kNotFound);
  CHECK(store->release_lease(other + 100, "replica-a", 1).code() == Code::kNotFound);
  CHECK(store->acquire_lease(other, "", 30).status().code() == Code::kInvalidArgument);
  CHECK(store->acquire_lease(other, "replica-a", 0).status().code() == Code::kInvalidArgument);
  CHECK(store->renew_lease(job, "replica-b", 3, -1).status().code() == Code::kInvalidArgument);
  CHECK(lease_of(*store, other).epoch == kUnleased);
}

// Expiry runs on the database's clock: a lease of 0.3 s is free for another holder once it
// has run out, and its holder may renew it until then, even late.
void lease_expiry(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  const JobId job = create(*store, job_record("j"));
  REQUIRE(store->acquire_lease(job, "replica-a", 0.3).ok());
  CHECK(store->acquire_lease(job, "replica-b", 30).status().code() == Code::kConflict);
  REQUIRE(eventually([&] { return !lease_of(*store, job).held(); }, 10));
  CHECK(lease_of(*store, job).remaining_s <= 0);
  // Expired, but nobody took it: the holder's renewal still lands, at the same epoch.
  auto late = store->renew_lease(job, "replica-a", 1, 0.3);
  REQUIRE_MESSAGE(late.ok(), late.status().to_string());
  CHECK(late->epoch == 1);
  CHECK(store->acquire_lease(job, "replica-b", 30).status().code() == Code::kConflict);
  REQUIRE(eventually([&] { return !lease_of(*store, job).held(); }, 10));
  auto taken = store->acquire_lease(job, "replica-b", 30);
  REQUIRE_MESSAGE(taken.ok(), taken.status().to_string());
  CHECK(taken->epoch == 2);
  CHECK(store->renew_lease(job, "replica-a", 1, 30).status().code() == Code::kConflict);
  CHECK(store->release_lease(job, "replica-a", 1).code() == Code::kConflict);
}

void fencing(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  const JobId job = create(*store, job_record("j"));
  // Never leased: epoch 0 writes, as a single coordinator makes them.
  REQUIRE(store->open_round(open_round_record(job, 1)).ok());
  REQUIRE(store->acquire_lease(job, "replica-a", 30).ok());  // epoch 1
  // Now writes at epoch 0 are refused and change nothing.
  CHECK(store->open_round(open_round_record(job, 2)).code() == Code::kConflict);
  CHECK(store
            ->commit_round(closed(open_round_record(job, 1), 40, {}), model(job, 1, "m1"),
                           {{"rho", 0.9}})
            .code() == Code::kConflict);
  CHECK(store->set_job_state(job, JobState::kPaused, kUnleased).code() == Code::kConflict);
  CHECK(store->list_rounds(job)->size() == 1);
  CHECK(store->list_rounds(job)->at(0).state == RoundState::kOpen);
  CHECK(store->get_job(job)->state == JobState::kRunning);
  // At the current epoch they land, and the round records it.
  REQUIRE(store->open_round(at_epoch(open_round_record(job, 2), 1)).ok());
  REQUIRE(store->set_job_state(job, JobState::kPaused, 1).ok());
  REQUIRE(store->fail_round(at_epoch(closed(open_round_record(job, 1), 41, {}), 1)).ok());
  auto rounds = store->list_rounds(job);
  REQUIRE(rounds->size() == 2);
  CHECK(rounds->at(0).epoch == 1);  // failed at epoch 1, opened at 0
  CHECK(rounds->at(1).epoch == 1);

  // Another replica takes the job over: everything the old owner writes is refused.
  REQUIRE(store->release_lease(job, "replica-a", 1).ok());
  REQUIRE(store->acquire_lease(job, "replica-b", 30).ok());  // epoch 2
  const RoundRecord r2 = at_epoch(open_round_record(job, 2), 1);
  auto stale =
      store->commit_round(closed(r2, 50, {{"updates", 1}}), model(job, 2, "m2"), {{"rho", 0.9}});
  CHECK(stale.code() == Code::kConflict);
  CHECK(stale.message() == "job " + std::to_string(job) +
                               "'s lease epoch 1 is not current (the job is at epoch 2): a write "
                               "at lease epoch 1 is refused");
  CHECK(stale.detail().find("replica-b") != std::string::npos);
  CHECK(store->fail_round(closed(r2, 50, {})).code() == Code::kConflict);
  CHECK(store->close_admission(job, 2, 1).code() == Code::kConflict);
  CHECK(store->set_job_state(job, JobState::kRunning, 1).code() == Code::kConflict);
  CHECK(store->open_round(at_epoch(open_round_record(job, 3), 1)).code() == Code::kConflict);
  rounds = store->list_rounds(job);
  REQUIRE(rounds->size() == 2);
  CHECK(rounds->at(1).state == RoundState::kOpen);
  CHECK(store->get_model(job, 2).status().code() == Code::kNotFound);
  CHECK(store->get_job(job)->policy_state == json{{"rho", 0.25}});
  CHECK(store->get_job(job)->state == JobState::kPaused);
  // The new owner concludes the old owner's round.
  REQUIRE(store->commit_round(at_epoch(closed(r2, 51, {}), 2), model(job, 2, "m2"), {{"rho", 0.5}})
              .ok());
  REQUIRE(store->set_job_state(job, JobState::kRunning, 2).ok());
  rounds = store->list_rounds(job);
  CHECK(rounds->at(1).state == RoundState::kCommitted);
  CHECK(rounds->at(1).epoch == 2);
  CHECK(store->get_job(job)->policy_state == json{{"rho", 0.5}});
  CHECK(store->set_job_state(job + 100, JobState::kPaused, 2).code() == Code::kNotFound);
}

// An owner commits round after round while another replica takes the job over the moment the
// owner's lease expires: once the acquisition returned, no write of the old epoch lands.
void fencing_race(const BackendFactory& factory) {
  auto backend = factory();
  auto owner = open(*backend);
  auto successor = open(*backend);
  const JobId job = create(*owner, job_record("j"));
  REQUIRE(owner->acquire_lease(job, "old", 0.5).ok());
  const std::string big(1 << 20, 'w');  // a commit that takes a while
  std::atomic<bool> refused{false};
  Status unexpected;
  std::thread old_owner([&] {
    for (RoundIndex r = 1; r < 100000 && !refused; ++r) {
      const RoundRecord round = at_epoch(open_round_record(job, r), 1);
      for (Status s : {owner->open_round(round),
                       owner->commit_round(closed(round, 60, {}), model(job, r, big), {})}) {
        if (s.code() == Code::kConflict) {
          refused = true;
        } else if (!s.ok()) {
          unexpected = s;
          refused = true;
        }
        if (refused) break;
      }
    }
  });
  Result<LeaseRecord> taken = conflict("not yet");
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    taken = successor->acquire_lease(job, "new", 30);
    if (taken.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto seen = successor->list_rounds(job);  // what the successor starts from
  old_owner.join();
  REQUIRE_MESSAGE(taken.ok(), taken.status().to_string());
  CHECK(taken->epoch == 2);
  CHECK_MESSAGE(unexpected.ok(), unexpected.to_string());
  REQUIRE(seen.ok());
  auto final_rounds = successor->list_rounds(job);
  REQUIRE(final_rounds.ok());
  REQUIRE(final_rounds->size() == seen->size());
  for (size_t i = 0; i < seen->size(); ++i) {
    CAPTURE(i);
    CHECK(final_rounds->at(i).state == seen->at(i).state);
    CHECK(final_rounds->at(i).epoch == 1);
  }
  CHECK(successor->latest_model(job)->version + 1 >= seen->size());  // the last may be open
}

void admission(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  auto other = open(*backend);  // another replica's
  const auto [a, b, c, d] = four_clients(*store);
  const JobId job = create(*store, job_record("j"));
  const std::string round1 = "round 1 of job " + std::to_string(job);
  REQUIRE(store->open_round(with_target(open_round_record(job, 1, {a, b, c, d}), 2)).ok());
  CHECK(store->list_rounds(job)->at(0).target == 2);
  CHECK(store->list_rounds(job)->at(0).admitted == 0);

  auto first = store->admit_update({job, 1, a, {{"samples", 3}}, 40, "r1"});
  REQUIRE_MESSAGE(first.ok(), first.status().to_string());
  CHECK_FALSE(*first);
  // Once per client, whichever replica asks.
  auto again = other->admit_update({job, 1, a, {{"samples", 4}}, 41, "r2"});
  CHECK(again.status().code() == Code::kConflict);
  CHECK(again.status().message() ==
        "client " + std::to_string(a) + " already has an update in " + round1);
  auto second = other->admit_update({job, 1, b, {{"samples", 5}}, 42, "r2"});
  REQUIRE_MESSAGE(second.ok(), second.status().to_string());
  CHECK(*second);  // the K-th: it filled the round
  auto full = store->admit_update({job, 1, c, {}, 43, "r1"});
  CHECK(full.status().code() == Code::kConflict);
  CHECK(full.status().message() == round1 + " is full (2 updates)");

  auto admission = other->round_admission(job, 1);
  REQUIRE_MESSAGE(admission.ok(), admission.status().to_string());
  CHECK(admission->target == 2);
  CHECK(admission->open);
  CHECK(admission->admitted() == 2);
  CHECK(admission->replicas == std::map<std::string, uint64_t>{{"r1", 1}, {"r2", 1}});
  CHECK(store->list_rounds(job)->at(0).admitted == 2);
  CHECK(*store->has_update(job, 1, a));
  CHECK(*store->has_update(job, 1, b));  // admitted through the other replica
  CHECK_FALSE(*other->has_update(job, 1, c));
  CHECK_FALSE(*store->has_update(job, 2, a));  // no round 2
  auto updates = store->list_updates(job, 1);
  REQUIRE(updates.ok());
  REQUIRE(updates->size() == 2);
  CHECK(updates->at(0).client == a);
  CHECK(updates->at(0).replica == "r1");
  CHECK(updates->at(0).meta == json{{"samples", 3}});
  CHECK(updates->at(0).received_at == 40);
  CHECK(updates->at(1).client == b);
  CHECK(updates->at(1).replica == "r2");

  // A withdrawal takes back the replica's own update only, once, and frees its place.
  auto foreign = store->withdraw_update(job, 1, b, "r1");
  CHECK(foreign.code() == Code::kConflict);
  CHECK(foreign.message().find("r1") == std::string::npos);  // the replica: in the detail
  CHECK(foreign.detail().find("r1") != std::string::npos);
  CHECK(store->withdraw_update(job, 1, c, "r1").code() == Code::kConflict);  // none
  REQUIRE(other->withdraw_update(job, 1, b, "r2").ok());
  CHECK(other->withdraw_update(job, 1, b, "r2").code() == Code::kConflict);
  CHECK_FALSE(*store->has_update(job, 1, b));
  CHECK(store->round_admission(job, 1)->admitted() == 1);
  CHECK(store->list_rounds(job)->at(0).admitted == 1);
  auto freed = store->admit_update({job, 1, c, {}, 44, "r1"});
  REQUIRE_MESSAGE(freed.ok(), freed.status().to_string());
  CHECK(*freed);
  CHECK(other->admit_update({job, 1, b, {}, 45, "r2"}).status().message() ==
        round1 + " is full (2 updates)");
  CHECK(store->round_admission(job, 1)->replicas == std::map<std::string, uint64_t>{{"r1", 2}});

  // Unknown rounds, jobs and clients.
  auto no_round = store->admit_update({job, 2, d, {}, 46, "r1"});
  CHECK(no_round.status().code() == Code::kConflict);
  CHECK(no_round.status().message() == "round 2 of job " + std::to_string(job) + " not found");
  CHECK(store->admit_update({job + 100, 1, d, {}, 46, "r1"}).status().code() == Code::kConflict);
  CHECK(store->withdraw_update(job, 2, a, "r1").code() == Code::kConflict);
  CHECK(store->round_admission(job, 2).status().code() == Code::kNotFound);
  REQUIRE(store->open_round(with_target(open_round_record(job, 2), 3)).ok());
  auto stranger = store->admit_update({job, 2, d + 100, {}, 46, "r1"});
  CHECK(stranger.status().code() == Code::kConflict);
  CHECK(stranger.status().message() == "client " + std::to_string(d + 100) + " not found");
  CHECK(store->round_admission(job, 2)->admitted() == 0);

  // Closed to admission: no admission and no withdrawal; what was admitted stays.
  REQUIRE(store->admit_update({job, 2, a, {}, 47, "r1"}).ok());
  REQUIRE(store->close_admission(job, 2, kUnleased).ok());
  REQUIRE(store->close_admission(job, 2, kUnleased).ok());  // idempotent
  CHECK_FALSE(store->round_admission(job, 2)->open);
  CHECK_FALSE(other->list_rounds(job)->at(1).admitting);
  auto closed_round = other->admit_update({job, 2, b, {}, 48, "r2"});
  CHECK(closed_round.status().code() == Code::kConflict);
  CHECK(closed_round.status().message() ==
        "round 2 of job " + std::to_string(job) + " is closed to admission");
  CHECK(store->withdraw_update(job, 2, a, "r1").code() == Code::kConflict);
  CHECK(*store->has_update(job, 2, a));
  CHECK(store->round_admission(job, 2)->admitted() == 1);

  // A concluded round admits nothing and keeps its updates.
  REQUIRE(
      store->commit_round(closed(open_round_record(job, 1), 50, {}), model(job, 1, "m1"), {}).ok());
  auto concluded = store->admit_update({job, 1, d, {}, 51, "r1"});
  CHECK(concluded.status().code() == Code::kConflict);
  CHECK(concluded.status().message() == round1 + " is concluded");
  CHECK(store->withdraw_update(job, 1, a, "r1").code() == Code::kConflict);
  CHECK(store->close_admission(job, 1, kUnleased).code() == Code::kConflict);
  CHECK(store->list_updates(job, 1)->size() == 2);
  CHECK(store->list_rounds(job)->at(0).admitted == 2);

  // A round without a target: each client once, no limit, and no check of the round's state
  // (its caller decided admission); withdrawals while it is open.
  REQUIRE(store->open_round(open_round_record(job, 3)).ok());
  for (ClientId client : {a, b, c}) {
    auto admitted = store->admit_update({job, 3, client, {}, 60.0 + client, ""});
    REQUIRE_MESSAGE(admitted.ok(), admitted.status().to_string());
    CHECK_FALSE(*admitted);
  }
  CHECK(store->admit_update({job, 3, b, {}, 64, ""}).status().code() == Code::kConflict);
  REQUIRE(store->withdraw_update(job, 3, c, "").ok());
  REQUIRE(store->fail_round(closed(open_round_record(job, 3), 70, {})).ok());
  REQUIRE(store->admit_update({job, 3, d, {}, 71, ""}).ok());
  CHECK(store->list_updates(job, 3)->size() == 3);
  CHECK(store->list_rounds(job)->at(2).admitted == 3);
  CHECK(store->round_admission(job, 3)->admitted() == 3);
}

// Several replicas admit their clients' uploads to one round of K from many threads at once,
// each client through two replicas at the same time: exactly K are admitted, each client at
// most once, and exactly one admission fills the round.
void admission_race(const BackendFactory& factory) {
  constexpr size_t kClients = 40, kPlaces = 10, kStores = 3, kThreadsPerStore = 3;
  auto backend = factory();
  std::vector<std::unique_ptr<Store>> stores;
  for (size_t i = 0; i < kStores; ++i) stores.push_back(open(*backend));
  std::vector<ClientId> clients;
  for (size_t i = 0; i < kClients; ++i) {
    clients.push_back(add(*stores[0], "hash-" + std::to_string(i)));
  }
  const JobId job = create(*stores[0], job_record("j"));
  REQUIRE(stores[0]->open_round(with_target(open_round_record(job, 1, clients), kPlaces)).ok());
  std::mutex mu;
  std::multiset<ClientId> admitted;
  size_t filled = 0;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kStores * kThreadsPerStore; ++t) {
    threads.emplace_back([&, t] {
      const size_t s = t % kStores;
      const std::string replica = "r" + std::to_string(s);
      // Thread t tries every client i with i % kThreadsPerStore == t / kStores, and so does a
      // thread of each other store: every client is raced for through every replica.
      for (size_t i = t / kStores; i < kClients; i += kThreadsPerStore) {
        auto r = stores[s]->admit_update({job, 1, clients[i], {{"by", replica}}, 1.0 * i, replica});
        std::lock_guard<std::mutex> lock(mu);
        if (r.ok()) {
          admitted.insert(clients[i]);
          filled += *r;
        } else if (r.status().code() != Code::kConflict) {
          errors.push_back(r.status().to_string());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& e : errors) FAIL_CHECK(e);
  CHECK(admitted.size() == kPlaces);
  CHECK(std::set<ClientId>(admitted.begin(), admitted.end()).size() == admitted.size());
  CHECK(filled == 1);
  auto admission = stores[1]->round_admission(job, 1);
  REQUIRE(admission.ok());
  CHECK(admission->admitted() == kPlaces);
  CHECK(stores[2]->list_rounds(job)->at(0).admitted == kPlaces);
  auto updates = stores[2]->list_updates(job, 1);
  REQUIRE(updates.ok());
  REQUIRE(updates->size() == kPlaces);
  for (const UpdateRecord& u : *updates) {
    CHECK(admitted.count(u.client) == 1);
    CHECK(u.meta == json{{"by", u.replica}});
  }
}

void partials(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  const auto [a, b, c, d] = four_clients(*store);
  const JobId job = create(*store, job_record("j"));
  REQUIRE(store->open_round(with_target(open_round_record(job, 1), 4)).ok());
  for (ClientId client : {a, b}) REQUIRE(store->admit_update({job, 1, client, {}, 40, "r1"}).ok());
  REQUIRE(store->admit_update({job, 1, c, {}, 41, "r2"}).ok());
  REQUIRE(store->admit_update({job, 1, d, {}, 42, "r3"}).ok());
  REQUIRE(store->withdraw_update(job, 1, d, "r3").ok());  // its fold failed
  std::string sum(1 << 20, '\0');                         // every byte value, NULs included
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = static_cast<char>(i * 7 + i / 256);
  const PartialRecord r1{job, 1, "r1", sum, 42.5, 2, 60};
  CHECK(store->put_partial(r1).code() == Code::kConflict);  // still admitting
  REQUIRE(store->close_admission(job, 1, kUnleased).ok());
  PartialRecord miscounted = r1;
  miscounted.updates = 3;  // it folded one the store did not admit
  auto refused = store->put_partial(miscounted);
  CHECK(refused.code() == Code::kConflict);
  CHECK(refused.message().find("admitted 2") != std::string::npos);
  CHECK(refused.message().find("r1") == std::string::npos);  // the replica: in the detail
  REQUIRE(store->put_partial(r1).ok());
  CHECK(store->put_partial(r1).code() == Code::kConflict);  // once per replica
  CHECK(store->put_partial({job, 1, "r3", "", 0, 1, 61}).code() == Code::kConflict);  // withdrawn
  REQUIRE(store->put_partial({job, 1, "r3", "", 0, 0, 61}).ok());
  REQUIRE(store->put_partial({job, 1, "r2", "two", 7, 1, 62}).ok());
  CHECK(store->put_partial({job, 2, "r1", "x", 1, 0, 63}).code() == Code::kConflict);  // no round

  auto listed = store->list_partials(job, 1);
  REQUIRE(listed.ok());
  REQUIRE(listed->size() == 3);
  CHECK(listed->at(0).replica == "r1");
  CHECK(listed->at(0).job == job);
  CHECK(listed->at(0).round == 1);
  CHECK(listed->at(0).sum == sum);
  CHECK(listed->at(0).weight == 42.5);
  CHECK(listed->at(0).updates == 2);
  CHECK(listed->at(0).written_at == 60);
  CHECK(listed->at(1).replica == "r2");
  CHECK(listed->at(1).sum == "two");
  CHECK(listed->at(2).replica == "r3");
  CHECK(listed->at(2).updates == 0);
  CHECK(store->list_partials(job, 2)->empty());

  // The round's conclusion drops its partials, keeps its updates.
  REQUIRE(
      store->commit_round(closed(open_round_record(job, 1), 70, {}), model(job, 1, "m1"), {}).ok());
  CHECK(store->list_partials(job, 1)->empty());
  CHECK(store->list_updates(job, 1)->size() == 3);
  CHECK(store->put_partial({job, 1, "r4", "", 0, 0, 71}).code() == Code::kConflict);
}

void stage_messages(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  const auto [a, b, c, d] = four_clients(*store);
  static_cast<void>(d);
  const JobId job = create(*store, job_record("j"));
  REQUIRE(store->open_round(with_target(open_round_record(job, 1), 3)).ok());
  const std::string body = "{\"keys\": \"\\u0000 and bytes\"}";
  REQUIRE(store->put_stage_messages({{job, 1, "keys", b, body}}).ok());
  REQUIRE(store->put_stage_messages({{job, 1, "keys", a, "{}"}}).ok());
  // Once per round, kind and client; a batch with one taken stores nothing.
  CHECK(store->put_stage_messages({{job, 1, "keys", b, "{}"}}).code() == Code::kConflict);
  CHECK(store->put_stage_messages({{job, 1, "keys", c, "{}"}, {job, 1, "keys", a, "{}"}}).code() ==
        Code::kConflict);
  CHECK(store->put_stage_messages({{job, 1, "", c, "{}"}}).code() == Code::kInvalidArgument);
  CHECK(store->put_stage_messages({{job, 2, "keys", c, "{}"}}).code() == Code::kConflict);  // no round
  REQUIRE(store->put_stage_messages({{job, 1, "keys_reply", a, "ra"}, {job, 1, "keys_reply", b,
                                     "rb"}})
              .ok());
  auto keys = store->list_stage_messages(job, 1, "keys");
  REQUIRE(keys.ok());
  REQUIRE(keys->size() == 2);
  CHECK(keys->at(0).client == a);
  CHECK(keys->at(0).body == "{}");
  CHECK(keys->at(1).client == b);
  CHECK(keys->at(1).body == body);
  CHECK(keys->at(1).job == job);
  CHECK(keys->at(1).round == 1);
  CHECK(keys->at(1).kind == "keys");
  CHECK(store->list_stage_messages(job, 1, "keys_reply")->size() == 2);
  CHECK(store->list_stage_messages(job, 1, "shares")->empty());
  // The round's conclusion drops its messages; none is taken afterwards.
  REQUIRE(store->fail_round(closed(open_round_record(job, 1), 70, {})).ok());
  CHECK(store->list_stage_messages(job, 1, "keys")->empty());
  CHECK(store->put_stage_messages({{job, 1, "shares", c, "{}"}}).code() == Code::kConflict);
}

void round_plans(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  auto other = open(*backend);  // another replica reads what the owner wrote
  const auto [a, b, c, unused] = four_clients(*store);
  const JobId job = create(*store, job_record("j"));
  RoundRecord round = with_target(open_round_record(job, 1, {a, b}), 2);
  round.plan = {{"tasks", json::array({{{"client", a}, {"batch_size", 32}, {"lr", 0.125}},
                                       {{"client", b}, {"note", "caf\xc3\xa9"}}})},
                {"base_checksum", "abc"}};
  round.admitting = false;  // read back only: open_round ignores them
  round.admitted = 7;
  REQUIRE(store->open_round(round).ok());
  REQUIRE(store->open_round(with_target(open_round_record(job, 2, {c}), 1)).ok());
  auto rounds = other->list_rounds(job);
  REQUIRE(rounds.ok());
  REQUIRE(rounds->size() == 2);
  CHECK(rounds->at(0).plan == round.plan);
  CHECK(rounds->at(0).admitting);
  CHECK(rounds->at(0).admitted == 0);
  CHECK(rounds->at(0).target == 2);
  CHECK(rounds->at(1).plan == json::object());  // a round served by its owner alone
  CHECK(rounds->at(1).admitting);
  // An open round's plan is replaced by its owner only (fenced like open_round), while the
  // round is open, closed to admission or not.
  const json buffer = {{"tasks", json::array({{{"client", c}, {"slot", 1}}})}};
  REQUIRE(store->update_round_plan(job, 2, buffer, kUnleased).ok());
  CHECK(other->list_rounds(job)->at(1).plan == buffer);
  REQUIRE(store->close_admission(job, 1, kUnleased).ok());
  rounds = other->list_rounds(job);
  REQUIRE(rounds.ok());
  CHECK_FALSE(rounds->at(0).admitting);
  CHECK(rounds->at(0).plan == round.plan);
  CHECK(rounds->at(1).admitting);
  REQUIRE(store->acquire_lease(job, "replica-a", 30).ok());  // epoch 1
  CHECK(store->update_round_plan(job, 2, json::object(), kUnleased).code() == Code::kConflict);
  CHECK(other->list_rounds(job)->at(1).plan == buffer);
  CHECK(store->update_round_plan(job, 3, buffer, 1).code() == Code::kConflict);  // no round 3
  CHECK(store->update_round_plan(job + 100, 2, buffer, 1).code() == Code::kConflict);
  REQUIRE(store->update_round_plan(job, 1, buffer, 1).ok());  // closed to admission: still open
  rounds = other->list_rounds(job);
  REQUIRE(rounds.ok());
  CHECK(rounds->at(0).plan == buffer);
  CHECK(rounds->at(0).epoch == 1);
  REQUIRE(store->update_round_plan(job, 1, round.plan, 1).ok());
  // A concluded round admits nothing, and keeps its plan.
  REQUIRE(store->fail_round(at_epoch(closed(open_round_record(job, 2, {c}), 60, {}), 1)).ok());
  REQUIRE(store
              ->commit_round(at_epoch(closed(open_round_record(job, 1), 70, {}), 1),
                             model(job, 1, "m1"), {})
              .ok());
  rounds = other->list_rounds(job);
  REQUIRE(rounds.ok());
  CHECK_FALSE(rounds->at(0).admitting);
  CHECK_FALSE(rounds->at(1).admitting);
  CHECK(rounds->at(0).plan == round.plan);
  CHECK(rounds->at(1).plan == buffer);
  CHECK(store->update_round_plan(job, 1, buffer, 1).code() == Code::kConflict);
  (void)unused;
}

void tenant_service(const BackendFactory& factory) {
  constexpr int kThreads = 4, kEach = 25;
  auto backend = factory();
  auto store = open(*backend);
  auto second = open(*backend);
  CHECK(store->list_tenant_service()->empty());
  auto charged = store->charge_tenant({2, 3.5, 10, 0});
  REQUIRE_MESSAGE(charged.ok(), charged.status().to_string());
  CHECK(charged->tenant == 2);
  CHECK(charged->counter == 3.5);
  CHECK(charged->client_seconds == 10);
  charged = store->charge_tenant({2, -5, -4, 0});  // a correction: never below 0
  REQUIRE(charged.ok());
  CHECK(charged->counter == 0);
  CHECK(charged->client_seconds == 6);
  charged = store->charge_tenant({2, 1, 0, 7});  // lifted to the least-served active tenant's
  REQUIRE(charged.ok());
  CHECK(charged->counter == 7);
  charged = store->charge_tenant({2, 1, 0, 2});  // a floor below the counter changes nothing
  REQUIRE(charged.ok());
  CHECK(charged->counter == 8);
  REQUIRE(second->charge_tenant({0, 0, 0, 1}).ok());  // the operator, tenant 0

  // Replicas charging one tenant at once add up.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Store& s = t % 2 == 0 ? *store : *second;
      for (int i = 0; i < kEach; ++i) {
        if (!s.charge_tenant({5, 1, 0.5, 0}).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  auto all = second->list_tenant_service();
  REQUIRE(all.ok());
  REQUIRE(all->size() == 3);
  CHECK(all->at(0).tenant == 0);
  CHECK(all->at(0).counter == 1);
  CHECK(all->at(1).tenant == 2);
  CHECK(all->at(1).counter == 8);
  CHECK(all->at(1).client_seconds == 6);
  CHECK(all->at(2).tenant == 5);
  CHECK(all->at(2).counter == kThreads * kEach);
  CHECK(all->at(2).client_seconds == kThreads * kEach * 0.5);
}

// The next wake-up `listener` hears, or nullopt after `timeout_s`.
std::optional<Notification> heard(Listener& listener, double timeout_s) {
  auto next = listener.next(timeout_s);
  REQUIRE_MESSAGE(next.ok(), next.status().to_string());
  return *next;
}

// Whether `listener` hears `want` within 10 s, among other wake-ups.
bool hears(Listener& listener, Notification want) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    auto n = heard(listener, 0.5);
    if (n && n->channel == want.channel && n->id == want.id) return true;
  }
  return false;
}

void wakeups(const BackendFactory& factory) {
  auto backend = factory();
  auto writer = open(*backend);
  auto reader = open(*backend);
  auto listening = reader->listen();
  REQUIRE_MESSAGE(listening.ok(), listening.status().to_string());
  Listener& listener = **listening;
  // Nothing yet: the wait ends at its timeout.
  const auto start = Clock::now();
  CHECK_FALSE(heard(listener, 0.2).has_value());
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  CHECK(waited >= 0.15);
  CHECK(waited < 5);

  const JobId job = create(*writer, job_record("j"));
  CHECK(hears(listener, {Channel::kJob, job}));
  REQUIRE(writer->open_round(open_round_record(job, 1)).ok());
  CHECK(hears(listener, {Channel::kRound, job}));
  REQUIRE(writer->acquire_lease(job, "replica-a", 30).ok());
  CHECK(hears(listener, {Channel::kLease, job}));
  REQUIRE(writer->notify(Channel::kClient, 77).ok());
  CHECK(hears(listener, {Channel::kClient, 77}));
  auto tenant = writer->add_tenant({0, "team", "hash-t", 1, json::object(), 1});
  REQUIRE(tenant.ok());
  CHECK(hears(listener, {Channel::kTenant, *tenant}));
  // A registration wakes the other replicas, which read the clients that changed.
  const ClientId registered = add(*writer, "hash-a");
  CHECK(hears(listener, {Channel::kClient, registered}));
  // A refused write wakes no one; nor do the admission's many small writes.
  CHECK(writer->open_round(open_round_record(job, 2)).code() == Code::kConflict);  // epoch 0
  CHECK(writer->add_client(client("hash-a")).status().code() == Code::kConflict);
  REQUIRE(writer->charge_tenant({*tenant, 1, 1, 0}).ok());
  CHECK_FALSE(heard(listener, 0.3).has_value());
  // Wake-ups come in the order of their commits, the writer's own listener's too.
  auto own = writer->listen();
  REQUIRE(own.ok());
  REQUIRE(writer->set_job_state(job, JobState::kPaused, 1).ok());
  REQUIRE(writer->close_admission(job, 1, 1).ok());
  for (Listener* l : {&listener, own->get()}) {
    auto first = heard(*l, 10);
    auto second = heard(*l, 10);
    REQUIRE(first.has_value());
    REQUIRE(second.has_value());
    CHECK(first->channel == Channel::kJob);
    CHECK(second->channel == Channel::kRound);
    CHECK(second->id == job);
  }
}

// The owner hears of a round's admission once, when it fills: an admission before that, or a
// withdrawal, wakes no one.
void admission_wakeups(const BackendFactory& factory) {
  auto backend = factory();
  auto replica = open(*backend);
  auto owner = open(*backend);
  const ClientId a = add(*replica, "hash-a"), b = add(*replica, "hash-b");
  const JobId job = create(*owner, job_record("j"));
  REQUIRE(owner->open_round(with_target(open_round_record(job, 1, {a, b}), 2)).ok());
  auto listening = owner->listen();
  REQUIRE_MESSAGE(listening.ok(), listening.status().to_string());
  Listener& listener = **listening;
  REQUIRE(replica->admit_update({job, 1, a, {}, 40, "r"}).ok());
  REQUIRE(replica->withdraw_update(job, 1, a, "r").ok());
  REQUIRE(replica->admit_update({job, 1, a, {}, 41, "r"}).ok());
  CHECK_FALSE(heard(listener, 0.3).has_value());
  auto filled = replica->admit_update({job, 1, b, {}, 42, "r"});
  REQUIRE_MESSAGE(filled.ok(), filled.status().to_string());
  CHECK(*filled);
  auto n = heard(listener, 10);
  REQUIRE(n.has_value());
  CHECK(n->channel == Channel::kRound);
  CHECK(n->id == job);
}

// Replicas starting at once on an empty database migrate it once, and all open.
void concurrent_migration(const BackendFactory& factory) {
  constexpr int kOpeners = 4;
  auto backend = factory();
  std::vector<Result<std::unique_ptr<Store>>> opened;
  for (int i = 0; i < kOpeners; ++i) opened.emplace_back(internal_error("not opened"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kOpeners; ++i) {
    threads.emplace_back([&, i] { opened[i] = backend->open(); });
  }
  for (auto& t : threads) t.join();
  for (auto& store : opened) {
    REQUIRE_MESSAGE(store.ok(), store.status().to_string());
  }
  CHECK(backend->schema_version() == backend->current_schema_version());
  const JobId job = create(**opened[0], job_record("j"));
  for (auto& store : opened) CHECK((*store)->get_job(job)->name == "j");
}

struct Case {
  const char* name;
  void (*run)(const BackendFactory&);
};

const Case kCases[] = {
    {"leases: acquire, renew and release by holder and epoch", leases},
    {"leases expire on the database's clock", lease_expiry},
    {"fenced writes: a stale epoch is refused and changes nothing", fencing},
    {"fencing holds against an acquisition racing the old owner's commits", fencing_race},
    {"admission: K updates, once per client, withdrawn places reused, closed rounds refuse",
     admission},
    {"admission: replicas racing from many threads admit exactly K", admission_race},
    {"partials: after admission closes, matching the admitted updates", partials},
    {"stage messages: once per round, kind and client, dropped with the round", stage_messages},
    {"a round's plan, replaced by its owner only, and whether it admits, read by every replica",
     round_plans},
    {"tenants' service counters add up across replicas", tenant_service},
    {"wake-ups reach every listener after the commit", wakeups},
    {"a round's admission wakes its owner when it fills", admission_wakeups},
    {"several openers migrate an empty database once", concurrent_migration},
};

}  // namespace

void check_cluster_contract(const BackendFactory& factory) {
  for (const Case& c : kCases) {
    SUBCASE(c.name) { c.run(factory); }
  }
}

}  // namespace fedcase::storage::contract
