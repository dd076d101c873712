#include "tests/storage/store_contract.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/storage/contract_records.h"

namespace fedcase::storage::contract {
namespace {

using nlohmann::json;

// ---- The cases ----------------------------------------------------------------------------

void clients(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  CHECK(store->ping().ok());
  CHECK(store->list_clients()->empty());
  const ClientId a = add(*store, "hash-a");
  const ClientId b = add(*store, "hash-b");
  CHECK(a >= 1);
  CHECK(b > a);
  auto dup = store->add_client(client("hash-a"));
  CHECK(dup.status().code() == Code::kConflict);

  auto got = store->get_client(a);
  REQUIRE(got.ok());
  CHECK(got->id == a);
  CHECK(got->token_hash == "hash-a");
  CHECK(got->info == client("hash-a").info);
  CHECK(got->profile == json{{"speed", 1.5}});
  CHECK(got->registered_at == 10.25);
  CHECK(got->last_seen == 11.5);
  CHECK(store->get_client(b + 100).status().code() == Code::kNotFound);
  auto found = store->find_client("hash-b");
  REQUIRE(found.ok());
  CHECK(found->id == b);
  CHECK(found->token_hash == "hash-b");
  CHECK(found->info == client("hash-b").info);
  CHECK(store->find_client("hash-c").status().code() == Code::kNotFound);
  CHECK(store->find_client("").status().code() == Code::kNotFound);

  // update_clients saves profile and last_seen only, for all of them or none.
  ClientRecord seen{a, "ignored", {{"ignored", true}}, {{"speed", 3}}, 0, 20};
  REQUIRE(store->update_clients({seen}).ok());
  REQUIRE(store->update_clients({}).ok());
  got = store->get_client(a);
  REQUIRE(got.ok());
  CHECK(got->token_hash == "hash-a");
  CHECK(got->info == client("hash-a").info);
  CHECK(got->registered_at == 10.25);
  CHECK(got->profile == json{{"speed", 3}});
  CHECK(got->last_seen == 20);
  ClientRecord faster{a, "", {}, {{"speed", 5}}, 0, 30};
  ClientRecord unknown{b + 100, "", {}, {{"speed", 4}}, 0, 30};
  CHECK(store->update_clients({faster, unknown}).code() == Code::kNotFound);
  CHECK(store->get_client(a)->profile == json{{"speed", 3}});

  // Every client, in the order of their registrations: a, then b; a saved contact does not
  // renumber a client.
  auto all = store->list_clients();
  REQUIRE(all.ok());
  REQUIRE(all->size() == 2);
  CHECK(all->at(0).id == a);
  CHECK(all->at(0).profile == json{{"speed", 3}});
  CHECK(all->at(1).id == b);
  CHECK(all->at(1).token_hash == "hash-b");
  CHECK(all->at(0).change >= 1);
  CHECK(all->at(0).change < all->at(1).change);
  // What changed after a number: the later registrations only, at most `limit` of them.
  auto after_a = store->clients_changed_after(all->at(0).change, 10);
  REQUIRE(after_a.ok());
  REQUIRE(after_a->size() == 1);
  CHECK(after_a->at(0).id == b);
  CHECK(store->clients_changed_after(all->at(1).change, 10)->empty());
  auto first = store->clients_changed_after(0, 1);
  REQUIRE(first.ok());
  REQUIRE(first->size() == 1);
  CHECK(first->at(0).id == a);
  const ClientId c = add(*store, "hash-c");
  REQUIRE(store->update_clients({ClientRecord{b, "", {}, {{"speed", 7}}, 0, 40}}).ok());
  auto latest = store->clients_changed_after(all->at(1).change, 10);
  REQUIRE(latest.ok());
  REQUIRE(latest->size() == 1);
  CHECK(latest->at(0).id == c);
}

// Saved contacts travel as one batch a save, numbered in order, the last ones kept.
void contact_batches(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  const ClientId a = add(*store, "hash-a"), b = add(*store, "hash-b");
  auto none = store->contacts_after(0, 10);
  REQUIRE(none.ok());
  CHECK(none->empty());
  // One save, one batch: each client once, with the last of its records.
  REQUIRE(store
              ->update_clients({ClientRecord{a, "", {}, {{"speed", 1}}, 0, 20},
                                ClientRecord{b, "", {}, {{"speed", 2}}, 0, 21},
                                ClientRecord{a, "", {}, {{"speed", 3}}, 0, 22}})
              .ok());
  REQUIRE(store->update_clients({}).ok());  // nothing saved: no batch
  CHECK_FALSE(store->update_clients({ClientRecord{b + 100, "", {}, {}, 0, 30}}).ok());
  REQUIRE(store->update_clients({ClientRecord{b, "", {}, {{"speed", 4}}, 0, 23}}).ok());
  auto batches = store->contacts_after(0, 10);
  REQUIRE(batches.ok());
  REQUIRE(batches->size() == 2);
  const ContactBatch& first = batches->at(0);
  CHECK(first.number >= 1);
  REQUIRE(first.contacts.size() == 2);
  CHECK(first.contacts[0].id == a);
  CHECK(first.contacts[0].last_seen == 22);
  CHECK(first.contacts[0].profile == json{{"speed", 3}});
  CHECK(first.contacts[1].id == b);
  CHECK(batches->at(1).number > first.number);
  REQUIRE(batches->at(1).contacts.size() == 1);
  CHECK(batches->at(1).contacts[0].profile == json{{"speed", 4}});
  auto later = store->contacts_after(first.number, 10);
  REQUIRE(later.ok());
  REQUIRE(later->size() == 1);
  CHECK(later->at(0).number == batches->at(1).number);
  CHECK(store->contacts_after(0, 1)->size() == 1);
  CHECK(first.saved_at == 22);
  // Batches saved more than kContactBatchesKeptS before a new one are dropped.
  const double later_s = 23 + Store::kContactBatchesKeptS;
  REQUIRE(store->update_clients({ClientRecord{a, "", {}, {}, 0, later_s}}).ok());
  auto kept = store->contacts_after(0, 10);
  REQUIRE(kept.ok());
  REQUIRE(kept->size() == 2);
  CHECK(kept->front().number == batches->at(1).number);
  CHECK(kept->back().saved_at == later_s);
}

void jobs(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  CHECK(store->list_jobs()->empty());
  JobRecord record = job_record("demo");
  record.id = 77;  // ignored: the store assigns ids
  auto first = store->create_job(record, model(99, 0, "m0"), kBinary);
  REQUIRE(first.ok());
  const JobId with_module = *first;
  const JobId without = create(*store, job_record("plain"), "p0");
  CHECK(with_module >= 1);
  CHECK(without > with_module);

  auto got = store->get_job(with_module);
  REQUIRE(got.ok());
  CHECK(got->id == with_module);
  CHECK(got->name == "demo");
  CHECK(got->config == record.config);
  CHECK(got->state == JobState::kRunning);
  CHECK(got->policy_state == json{{"rho", 0.25}});
  CHECK(got->created_at == 5.5);
  CHECK(got->tenant == 0);
  CHECK(store->get_job(without + 100).status().code() == Code::kNotFound);

  // The initial model is stored under the new job's id, whatever job it named.
  auto initial = store->get_model(with_module, 0);
  REQUIRE(initial.ok());
  check_same_model(*initial, model(with_module, 0, "m0"));
  CHECK(store->get_model(99, 0).status().code() == Code::kNotFound);

  auto module = store->get_job_module(with_module);
  REQUIRE(module.ok());
  CHECK(*module == kBinary);
  CHECK(store->get_job_module(without).status().code() == Code::kNotFound);
  CHECK(store->get_job_module(without + 100).status().code() == Code::kNotFound);

  for (JobState state : {JobState::kPaused, JobState::kRunning, JobState::kCancelled}) {
    REQUIRE(store->set_job_state(without, state, kUnleased).ok());
    CHECK(store->get_job(without)->state == state);
  }
  CHECK(store->get_job(with_module)->state == JobState::kRunning);
  CHECK(store->set_job_state(without + 100, JobState::kPaused, kUnleased).code() ==
        Code::kNotFound);

  auto all = store->list_jobs();
  REQUIRE(all.ok());
  REQUIRE(all->size() == 2);
  CHECK(all->at(0).id == with_module);
  CHECK(all->at(1).id == without);
  CHECK(all->at(1).state == JobState::kCancelled);
}

void tenants(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  CHECK(store->list_tenants()->empty());
  TenantRecord team{0, "team-a", "hash-a", 2.0, {{"max_running_jobs", 3}}, 5.0};
  auto a = store->add_tenant(team);
  REQUIRE(a.ok());
  CHECK(*a == 1);
  team.token_hash = "hash-b";
  CHECK(store->add_tenant(team).status().code() == Code::kConflict);  // same name
  team.name = "team-b";
  team.token_hash = "hash-a";
  CHECK(store->add_tenant(team).status().code() == Code::kConflict);  // same token
  team.token_hash = "hash-b";
  team.weight = 0.5;
  auto b = store->add_tenant(team);
  REQUIRE(b.ok());
  CHECK(*b > *a);

  auto all = store->list_tenants();
  REQUIRE(all.ok());
  REQUIRE(all->size() == 2);
  CHECK(all->at(0).id == *a);
  CHECK(all->at(0).name == "team-a");
  CHECK(all->at(0).token_hash == "hash-a");
  CHECK(all->at(0).weight == 2.0);
  CHECK(all->at(0).limits == json{{"max_running_jobs", 3}});
  CHECK(all->at(0).created_at == 5.0);
  CHECK(all->at(1).name == "team-b");
  CHECK(all->at(1).weight == 0.5);

  const JobId owned = create(*store, job_record("owned", *b));
  CHECK(store->get_job(owned)->tenant == *b);
  CHECK(store->list_jobs()->at(0).tenant == *b);
}

void rounds(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  const ClientId a = add(*store, "hash-a");
  const ClientId b = add(*store, "hash-b");
  const JobId job = create(*store, job_record("j"));
  const JobId other = create(*store, job_record("other"));
  CHECK(store->list_rounds(job)->empty());

  RoundRecord r1 = open_round_record(job, 1, {a, b});
  REQUIRE(store->open_round(r1).ok());
  CHECK(store->open_round(open_round_record(job, 1)).code() == Code::kConflict);
  CHECK(store->open_round(open_round_record(other + 100, 1)).code() == Code::kConflict);
  REQUIRE(store->open_round(open_round_record(other, 1)).ok());  // indices are per job

  auto listed = store->list_rounds(job);
  REQUIRE(listed.ok());
  REQUIRE(listed->size() == 1);
  const RoundRecord& open1 = listed->at(0);
  CHECK(open1.job == job);
  CHECK(open1.index == 1);
  CHECK(open1.state == RoundState::kOpen);
  CHECK(open1.base_version == 0);
  CHECK(open1.selected == std::vector<ClientId>{a, b});
  CHECK(open1.opened_at == 31);
  CHECK(open1.deadline == 91);
  CHECK(store->add_round_metrics(job, 1, {{"x", 1}}).code() == Code::kNotFound);  // still open

  const json metrics = {{"updates", 2}, {"dropped", json::object()}};
  REQUIRE(store->commit_round(closed(r1, 50, metrics), model(job, 1, "m1"), {{"rho", 0.5}}).ok());
  CHECK(store->commit_round(closed(r1, 51, {}), model(job, 2, "m2"), {}).code() ==
        Code::kConflict);  // committed already
  CHECK(store->fail_round(closed(r1, 52, {})).code() == Code::kConflict);

  RoundRecord r2 = open_round_record(job, 2, {a});
  REQUIRE(store->open_round(r2).ok());
  REQUIRE(store->fail_round(closed(r2, 60, {{"failure", "deadline"}})).ok());
  CHECK(store->fail_round(closed(r2, 61, {})).code() == Code::kConflict);
  CHECK(store->commit_round(closed(r2, 62, {}), model(job, 2, "m2"), {}).code() == Code::kConflict);
  CHECK(store->get_model(job, 2).status().code() == Code::kNotFound);
  CHECK(store->fail_round(closed(open_round_record(job, 9), 1, {})).code() == Code::kConflict);
  CHECK(store->open_round(open_round_record(job, 2)).code() == Code::kConflict);  // closed

  // add_round_metrics merges top-level keys into a closed round's metrics.
  REQUIRE(store->add_round_metrics(job, 1, {{"test_accuracy", 0.6}, {"updates", 3}}).ok());
  REQUIRE(store->add_round_metrics(job, 2, {{"test_loss", 0.7}}).ok());
  CHECK(store->add_round_metrics(job, 3, {}).code() == Code::kNotFound);
  CHECK(store->add_round_metrics(other + 100, 1, {}).code() == Code::kNotFound);

  listed = store->list_rounds(job);
  REQUIRE(listed.ok());
  REQUIRE(listed->size() == 2);
  CHECK(listed->at(0).index == 1);
  CHECK(listed->at(0).state == RoundState::kCommitted);
  CHECK(listed->at(0).closed_at == 50);
  CHECK(listed->at(0).selected == std::vector<ClientId>{a, b});
  CHECK(listed->at(0).metrics ==
        json{{"updates", 3}, {"dropped", json::object()}, {"test_accuracy", 0.6}});
  CHECK(listed->at(1).index == 2);
  CHECK(listed->at(1).state == RoundState::kFailed);
  CHECK(listed->at(1).base_version == 1);
  CHECK(listed->at(1).closed_at == 60);
  CHECK(listed->at(1).metrics == json{{"failure", "deadline"}, {"test_loss", 0.7}});
  CHECK(store->get_job(job)->policy_state == json{{"rho", 0.5}});
  CHECK(store->get_job(other)->policy_state == json{{"rho", 0.25}});
  CHECK(store->list_rounds(other)->size() == 1);
  CHECK(store->list_rounds(other + 100)->empty());
}

void updates(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  const ClientId a = add(*store, "hash-a");
  const ClientId b = add(*store, "hash-b");
  const JobId job = create(*store, job_record("j"));
  REQUIRE(store->open_round(open_round_record(job, 1, {a, b})).ok());
  CHECK(store->list_updates(job, 1)->empty());

  // A round without a target takes what its caller admitted: never "filled".
  auto first = store->admit_update({job, 1, b, {{"samples", 30}, {"loss_sum", 1.5}}, 41});
  REQUIRE_MESSAGE(first.ok(), first.status().to_string());
  CHECK_FALSE(*first);
  REQUIRE(store->admit_update({job, 1, a, {{"samples", 12}}, 40}).ok());
  auto duplicate = store->admit_update({job, 1, a, {{"samples", 1}}, 42});
  CHECK(duplicate.status().code() == Code::kConflict);
  CHECK(duplicate.status().message() == "client " + std::to_string(a) +
                                            " already has an update in round 1 of job " +
                                            std::to_string(job));
  auto no_round = store->admit_update({job, 2, a, {}, 43});
  CHECK(no_round.status().code() == Code::kConflict);
  CHECK(no_round.status().message() == "round 2 of job " + std::to_string(job) + " not found");
  auto no_client = store->admit_update({job, 1, b + 100, {}, 44});
  CHECK(no_client.status().code() == Code::kConflict);
  CHECK(no_client.status().message() == "client " + std::to_string(b + 100) + " not found");
  CHECK(store->admit_update({job + 100, 1, a, {}, 45}).status().code() == Code::kConflict);
  CHECK(store->list_rounds(job)->at(0).admitted == 2);

  auto listed = store->list_updates(job, 1);
  REQUIRE(listed.ok());
  REQUIRE(listed->size() == 2);  // in the order they were received
  CHECK(listed->at(0).job == job);
  CHECK(listed->at(0).round == 1);
  CHECK(listed->at(0).client == a);
  CHECK(listed->at(0).meta == json{{"samples", 12}});
  CHECK(listed->at(0).received_at == 40);
  CHECK(listed->at(1).client == b);
  CHECK(listed->at(1).meta == json{{"samples", 30}, {"loss_sum", 1.5}});
  CHECK(store->list_updates(job, 2)->empty());

  // A round's updates stay with it once it concludes.
  REQUIRE(
      store->commit_round(closed(open_round_record(job, 1), 50, {}), model(job, 1, "m1"), {}).ok());
  CHECK(store->list_updates(job, 1)->size() == 2);
}

void uploads(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  const ClientId a = add(*store, "hash-a");
  const ClientId b = add(*store, "hash-b");
  const JobId job = create(*store, job_record("j"));
  const UploadRecord opening{job, 1, "u-a", a, 10, 4, std::string(64, 'a'), {{"samples", 3}}};
  CHECK(store->open_upload(opening).status().code() == Code::kConflict);  // no round yet
  REQUIRE(store->open_round(open_round_record(job, 1, {a, b})).ok());
  auto opened = store->open_upload(opening);
  REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
  CHECK(opened->id == "u-a");
  CHECK(opened->chunks == 0);

  // Chunks are stored in order only; each keeps its bytes.
  CHECK(store->put_upload_chunk(job, 1, "u-a", 1, "efgh", 0.5).code() == Code::kConflict);
  REQUIRE(store->put_upload_chunk(job, 1, "u-a", 0, std::string("ab\0d", 4), 0.25).ok());
  CHECK(store->put_upload_chunk(job, 1, "u-a", 0, "abcd", 0.5).code() == Code::kConflict);
  REQUIRE(store->put_upload_chunk(job, 1, "u-a", 1, "efgh", 0.5).ok());
  CHECK(store->put_upload_chunk(job, 1, "nope", 0, "abcd", 0.5).code() == Code::kNotFound);
  auto read = store->get_upload(job, 1, "u-a");
  REQUIRE(read.ok());
  CHECK(read->client == a);
  CHECK(read->bytes == 10);
  CHECK(read->chunk_bytes == 4);
  CHECK(read->sha256 == opening.sha256);
  CHECK(read->meta == json{{"samples", 3}});
  CHECK(read->chunks == 2);
  CHECK(read->seconds == doctest::Approx(0.75));
  CHECK(*store->get_upload_chunk(job, 1, "u-a", 0) == std::string("ab\0d", 4));
  CHECK(*store->get_upload_chunk(job, 1, "u-a", 1) == "efgh");
  CHECK(store->get_upload_chunk(job, 1, "u-a", 2).status().code() == Code::kNotFound);
  CHECK(store->get_upload(job, 1, "nope").status().code() == Code::kNotFound);
  CHECK(store->get_upload(job, 2, "u-a").status().code() == Code::kNotFound);

  // Opening the same update again resumes it; another update replaces it.
  UploadRecord again = opening;
  again.id = "u-a2";
  CHECK(store->open_upload(again)->id == "u-a");
  again.sha256 = std::string(64, 'b');
  REQUIRE(store->open_upload(again).ok());
  CHECK(store->get_upload(job, 1, "u-a").status().code() == Code::kNotFound);
  CHECK(store->get_upload(job, 1, "u-a2")->chunks == 0);
  CHECK(store->get_upload_chunk(job, 1, "u-a", 0).status().code() == Code::kNotFound);

  // Dropped one by one, or all with their round.
  REQUIRE(store->open_upload({job, 1, "u-b", b, 8, 4, std::string(64, 'c'), {}}).ok());
  REQUIRE(store->put_upload_chunk(job, 1, "u-b", 0, "ijkl", 0.1).ok());
  REQUIRE(store->drop_upload(job, 1, "u-a2").ok());
  REQUIRE(store->drop_upload(job, 1, "u-a2").ok());
  CHECK(store->get_upload(job, 1, "u-a2").status().code() == Code::kNotFound);
  CHECK(store->get_upload(job, 1, "u-b")->chunks == 1);
  REQUIRE(store->fail_round(closed(open_round_record(job, 1), 50, {})).ok());
  CHECK(store->get_upload(job, 1, "u-b").status().code() == Code::kNotFound);
  CHECK(store->get_upload_chunk(job, 1, "u-b", 0).status().code() == Code::kNotFound);
  CHECK(store->open_upload(opening).status().code() == Code::kConflict);
}

// Models are stored in pieces (a SQL store's are 1 MiB, each kept once): versions that share
// most of their bytes, and one that ends mid-piece, read back whole.
void large_models(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  std::string blob = std::string((3u << 20) + 3, '\0');  // 3 MiB and 3 bytes
  for (size_t i = 0; i < blob.size(); i += 4093) blob[i] = char(i / 4093);
  const JobId job = create(*store, job_record("large"), blob);
  std::string next = blob;
  next[next.size() - 2] ^= 1;  // the same but in the last piece
  REQUIRE(store->open_round(open_round_record(job, 1)).ok());
  REQUIRE(store
              ->commit_round(closed(open_round_record(job, 1), 50, {}),
                             {job, 1, next, "sum", "", 101}, json::object())
              .ok());
  CHECK(store->get_model(job, 0)->blob == blob);
  CHECK(store->get_model(job, 1)->blob == next);
  CHECK(store->latest_model(job)->blob == next);
}

void models(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  const JobId job = create(*store, job_record("j"), kBinary + "v0");
  const JobId other = create(*store, job_record("other"), "o0");
  auto latest = store->latest_model(job);
  REQUIRE(latest.ok());
  check_same_model(*latest, model(job, 0, kBinary + "v0"));

  // Versions skip failed rounds: round 2 fails, round 3 commits version 3.
  REQUIRE(store->open_round(open_round_record(job, 1)).ok());
  REQUIRE(store
              ->commit_round(closed(open_round_record(job, 1), 50, {}), model(job, 1, "m1"),
                             json::object())
              .ok());
  REQUIRE(store->open_round(open_round_record(job, 2)).ok());
  REQUIRE(store->fail_round(closed(open_round_record(job, 2), 60, {})).ok());
  REQUIRE(store->open_round(open_round_record(job, 3)).ok());
  REQUIRE(store
              ->commit_round(closed(open_round_record(job, 3), 70, {}), model(job, 3, "m3"),
                             json::object())
              .ok());

  latest = store->latest_model(job);
  REQUIRE(latest.ok());
  check_same_model(*latest, model(job, 3, "m3"));
  auto v1 = store->get_model(job, 1);
  REQUIRE(v1.ok());
  check_same_model(*v1, model(job, 1, "m1"));
  CHECK(store->get_model(job, 0)->blob == kBinary + "v0");
  CHECK(store->get_model(job, 2).status().code() == Code::kNotFound);
  CHECK(store->get_model(job, 4).status().code() == Code::kNotFound);
  CHECK(store->latest_model(other)->blob == "o0");
  CHECK(store->latest_model(other + 100).status().code() == Code::kNotFound);
  CHECK(store->get_model(other + 100, 0).status().code() == Code::kNotFound);
}

void commit_round_atomic(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  const JobId job = create(*store, job_record("j"));
  // Committing a round that was never opened stores nothing: no model, no policy state.
  RoundRecord ghost = closed(open_round_record(job, 1), 5, {{"updates", 1}});
  CHECK(store->commit_round(ghost, model(job, 1, "m1"), {{"rho", 0.9}}).code() == Code::kConflict);
  CHECK(store->get_model(job, 1).status().code() == Code::kNotFound);
  CHECK(store->latest_model(job)->version == 0);
  CHECK(store->get_job(job)->policy_state == json{{"rho", 0.25}});
  CHECK(store->list_rounds(job)->empty());

  // A model version that is already stored fails the whole commit: the round stays open.
  REQUIRE(store->open_round(open_round_record(job, 1)).ok());
  CHECK(store->commit_round(ghost, model(job, 0, "dup"), {{"rho", 0.9}}).code() == Code::kConflict);
  auto listed = store->list_rounds(job);
  REQUIRE(listed->size() == 1);
  CHECK(listed->at(0).state == RoundState::kOpen);
  CHECK(listed->at(0).closed_at == 0);
  CHECK(listed->at(0).metrics == json::object());
  CHECK(store->get_model(job, 0)->blob == "m0");
  CHECK(store->get_job(job)->policy_state == json{{"rho", 0.25}});

  // The round may still conclude afterwards, all of it.
  REQUIRE(store->commit_round(ghost, model(job, 1, "m1"), {{"rho", 0.9}}).ok());
  CHECK(store->list_rounds(job)->at(0).state == RoundState::kCommitted);
  CHECK(store->list_rounds(job)->at(0).metrics == json{{"updates", 1}});
  CHECK(store->latest_model(job)->blob == "m1");
  CHECK(store->get_job(job)->policy_state == json{{"rho", 0.9}});
}

void create_job_atomic(const BackendFactory& factory) {
  auto backend = factory();
  auto store = open(*backend);
  const JobId before = create(*store, job_record("before"), "b0", "module-b");
  const std::optional<JobId> blocked = backend->block_next_job_module();
  if (!blocked) {
    MESSAGE("skipped: the backend cannot make a module insert fail");
    return;
  }
  CHECK_FALSE(store->create_job(job_record("blocked"), model(0, 0, "x0"), "module-x").ok());
  auto jobs = store->list_jobs();
  REQUIRE(jobs.ok());
  REQUIRE(jobs->size() == 1);
  CHECK(jobs->at(0).id == before);
  CHECK(store->get_job(*blocked).status().code() == Code::kNotFound);
  CHECK(store->get_model(*blocked, 0).status().code() == Code::kNotFound);
  CHECK(store->latest_model(*blocked).status().code() == Code::kNotFound);
  CHECK(*store->get_job_module(before) == "module-b");
  CHECK(store->latest_model(before)->blob == "b0");
}

void survives_reopening(const BackendFactory& factory) {
  auto backend = factory();
  ClientId a = 0;
  JobId job = 0;
  TenantId tenant = 0;
  {
    auto store = open(*backend);
    a = add(*store, "hash-a");
    auto t = store->add_tenant({0, "team", "hash-t", 3, {{"max_running_jobs", 1}}, 2});
    REQUIRE(t.ok());
    tenant = *t;
    job = create(*store, job_record("kept", tenant), "m0", kBinary);
    REQUIRE(store->update_clients({ClientRecord{a, "", {}, {{"speed", 9}}, 0, 44}}).ok());
    REQUIRE(store->set_job_state(job, JobState::kPaused, kUnleased).ok());
    REQUIRE(store->open_round(open_round_record(job, 1, {a})).ok());
    REQUIRE(store->admit_update({job, 1, a, {{"samples", 12}}, 40}).ok());
    REQUIRE(store
                ->commit_round(closed(open_round_record(job, 1, {a}), 50, {{"updates", 1}}),
                               model(job, 1, "m1"), {{"rho", 0.2}})
                .ok());
    REQUIRE(store->add_round_metrics(job, 1, {{"test_accuracy", 0.5}}).ok());
    REQUIRE(store->open_round(open_round_record(job, 2, {a})).ok());
    REQUIRE(store->admit_update({job, 2, a, {{"samples", 7}}, 60}).ok());
    REQUIRE(store->fail_round(closed(open_round_record(job, 2, {a}), 70, {{"failure", "x"}})).ok());
  }
  auto store = open(*backend);
  auto c = store->get_client(a);
  REQUIRE(c.ok());
  CHECK(c->token_hash == "hash-a");
  CHECK(c->info == client("hash-a").info);
  CHECK(c->profile == json{{"speed", 9}});
  CHECK(c->last_seen == 44);
  CHECK(store->add_client(client("hash-a")).status().code() == Code::kConflict);
  auto j = store->get_job(job);
  REQUIRE(j.ok());
  CHECK(j->name == "kept");
  CHECK(j->state == JobState::kPaused);
  CHECK(j->policy_state == json{{"rho", 0.2}});
  CHECK(j->tenant == tenant);
  CHECK(*store->get_job_module(job) == kBinary);
  REQUIRE(store->list_tenants()->size() == 1);
  CHECK(store->list_tenants()->at(0).limits == json{{"max_running_jobs", 1}});
  auto rounds = store->list_rounds(job);
  REQUIRE(rounds.ok());
  REQUIRE(rounds->size() == 2);
  CHECK(rounds->at(0).state == RoundState::kCommitted);
  CHECK(rounds->at(0).metrics == json{{"updates", 1}, {"test_accuracy", 0.5}});
  CHECK(rounds->at(1).state == RoundState::kFailed);
  CHECK(store->list_updates(job, 1)->size() == 1);
  CHECK(store->list_updates(job, 2)->at(0).meta == json{{"samples", 7}});
  check_same_model(*store->latest_model(job), model(job, 1, "m1"));
  // Ids go on from where they were.
  CHECK(add(*store, "hash-b") > a);
  CHECK(create(*store, job_record("next")) > job);
}

void used_keys(const BackendFactory& factory) {
  auto backend = factory();
  JobId job = 0, other = 0;
  {
    auto store = open(*backend);
    job = create(*store, job_record("secure"));
    other = create(*store, job_record("other"));
    const std::string binary_key("\x00\xff\x01key", 6);
    REQUIRE(store->put_used_keys(job, 1, {"a1", binary_key}, 64).ok());
    REQUIRE(store->put_used_keys(job, 2, {"b2", "a1"}, 64).ok());  // a1 stays round 1's
    REQUIRE(store->put_used_keys(other, 1, {"z"}, 64).ok());
    CHECK(*store->list_used_keys(job) == std::set<std::string>{"a1", binary_key, "b2"});
  }
  // Kept across a reopening (another replica, a restart); the rounds past the window go.
  auto store = open(*backend);
  CHECK(store->list_used_keys(job)->size() == 3);
  REQUIRE(store->put_used_keys(job, 3, {"c3"}, 1).ok());
  CHECK(*store->list_used_keys(job) == std::set<std::string>{"b2", "c3"});
  CHECK(*store->list_used_keys(other) == std::set<std::string>{"z"});
  CHECK(store->list_used_keys(999)->empty());
}

void second_store_sees_commits(const BackendFactory& factory) {
  auto backend = factory();
  auto writer = open(*backend);
  auto reader = open(*backend);
  const ClientId a = add(*writer, "hash-a");
  const JobId job = create(*writer, job_record("j"));
  CHECK(reader->get_client(a)->token_hash == "hash-a");
  CHECK(reader->get_job(job)->name == "j");
  REQUIRE(writer->open_round(open_round_record(job, 1, {a})).ok());
  REQUIRE(writer->admit_update({job, 1, a, {{"samples", 3}}, 40}).ok());
  REQUIRE(writer
              ->commit_round(closed(open_round_record(job, 1, {a}), 50, {}), model(job, 1, "m1"),
                             {{"rho", 0.7}})
              .ok());
  CHECK(reader->latest_model(job)->blob == "m1");
  CHECK(reader->list_rounds(job)->at(0).state == RoundState::kCommitted);
  CHECK(reader->list_updates(job, 1)->size() == 1);
  CHECK(reader->get_job(job)->policy_state == json{{"rho", 0.7}});
  // Writes through either store are refused or accepted the same way.
  CHECK(reader->add_client(client("hash-a")).status().code() == Code::kConflict);
  REQUIRE(reader->set_job_state(job, JobState::kPaused, kUnleased).ok());
  CHECK(writer->get_job(job)->state == JobState::kPaused);
}

void older_schema_migrates(const BackendFactory& factory) {
  const int current = factory()->current_schema_version();
  if (current == 0) {
    MESSAGE("skipped: the backend keeps no schema");
    return;
  }
  for (int version = 1; version < current; ++version) {
    CAPTURE(version);
    auto backend = factory();
    ClientId a = 0;
    JobId owned = 0, plain = 0;
    TenantId tenant = 0;
    {
      auto store = open(*backend);
      a = add(*store, "hash-a");
      auto t = store->add_tenant({0, "team", "hash-t", 2, json::object(), 1});
      REQUIRE(t.ok());
      tenant = *t;
      owned = create(*store, job_record("owned", tenant), "o0", kBinary);
      plain = create(*store, job_record("plain"), "p0");
      REQUIRE(store->open_round(open_round_record(plain, 1, {a})).ok());
      REQUIRE(store->admit_update({plain, 1, a, {{"samples", 5}}, 40}).ok());
      REQUIRE(store
                  ->commit_round(closed(open_round_record(plain, 1, {a}), 50, {{"updates", 1}}),
                                 model(plain, 1, "p1"), {{"rho", 0.4}})
                  .ok());
      REQUIRE(store->open_round(open_round_record(plain, 2, {a})).ok());
    }
    backend->rewind_schema(version);
    CHECK(backend->schema_version() == version);

    auto store = open(*backend);
    CHECK(backend->schema_version() == current);
    // What every schema version holds is kept.
    auto c = store->get_client(a);
    REQUIRE(c.ok());
    CHECK(c->token_hash == "hash-a");
    CHECK(c->info == client("hash-a").info);
    auto jobs = store->list_jobs();
    REQUIRE(jobs.ok());
    REQUIRE(jobs->size() == 2);
    CHECK(jobs->at(0).name == "owned");
    CHECK(jobs->at(1).name == "plain");
    CHECK(jobs->at(1).config == job_record("plain").config);
    CHECK(jobs->at(1).policy_state == json{{"rho", 0.4}});
    CHECK(jobs->at(1).tenant == 0);
    auto rounds = store->list_rounds(plain);
    REQUIRE(rounds.ok());
    REQUIRE(rounds->size() == 2);
    CHECK(rounds->at(0).state == RoundState::kCommitted);
    CHECK(rounds->at(0).metrics == json{{"updates", 1}});
    CHECK(rounds->at(0).admitted == 1);  // counted from the updates an older version stored
    CHECK(rounds->at(1).state == RoundState::kOpen);
    CHECK(rounds->at(1).admitting);
    CHECK(rounds->at(1).admitted == 0);
    CHECK(rounds->at(1).plan == json::object());  // a round opened before plans were stored
    CHECK(store->list_updates(plain, 1)->size() == 1);
    check_same_model(*store->latest_model(plain), model(plain, 1, "p1"));
    check_same_model(*store->get_model(owned, 0), model(owned, 0, "o0"));
    // What the older version could not hold reads as absent, never as an error.
    auto tenants = store->list_tenants();
    REQUIRE(tenants.ok());
    if (tenants->empty()) {
      CHECK(jobs->at(0).tenant == 0);
    } else {
      REQUIRE(tenants->size() == 1);
      CHECK(tenants->at(0).name == "team");
      CHECK(jobs->at(0).tenant == tenant);
    }
    auto module = store->get_job_module(owned);
    if (!module.ok()) {
      CHECK(module.status().code() == Code::kNotFound);
    } else {
      CHECK(*module == kBinary);
    }
    // And every method works on the migrated database.
    auto t = store->add_tenant({0, "team-2", "hash-t2", 1, json::object(), 2});
    REQUIRE(t.ok());
    const JobId scripted = create(*store, job_record("scripted", *t), "s0", "ts");
    CHECK(*store->get_job_module(scripted) == "ts");
    CHECK(store->get_job(scripted)->tenant == *t);
    REQUIRE(store->fail_round(closed(open_round_record(plain, 2, {a}), 60, {})).ok());
    REQUIRE(store->open_round(open_round_record(plain, 3, {a})).ok());
    REQUIRE(store->admit_update({plain, 3, a, {}, 70}).ok());
    REQUIRE(store
                ->commit_round(closed(open_round_record(plain, 3, {a}), 80, {}),
                               model(plain, 3, "p3"), {{"rho", 0.1}})
                .ok());
    store.reset();
    auto reopened = open(*backend);
    CHECK(backend->schema_version() == current);
    CHECK(reopened->list_jobs()->size() == 3);
    CHECK(reopened->latest_model(plain)->blob == "p3");
  }
}

void newer_schema_refused(const BackendFactory& factory) {
  auto backend = factory();
  const int current = backend->current_schema_version();
  if (current == 0) {
    MESSAGE("skipped: the backend keeps no schema");
    return;
  }
  JobId job = 0;
  {
    auto store = open(*backend);
    job = create(*store, job_record("j"));
  }
  CHECK(backend->schema_version() == current);
  backend->set_schema_version(current + 1);
  auto refused = backend->open();
  CHECK(refused.status().code() == Code::kInvalidArgument);
  CHECK(refused.status().message().find("newer") != std::string::npos);
  CHECK(backend->schema_version() == current + 1);  // refusing changed nothing
  backend->set_schema_version(current);
  auto store = open(*backend);
  CHECK(store->get_job(job)->name == "j");
}

// A writer opens, fills and concludes rounds (every fourth one fails) while readers on the
// same store and on a second one check that each commit is seen whole or not at all.
void readers_while_a_writer_writes(const BackendFactory& factory) {
  constexpr RoundIndex kRounds = 40;
  constexpr size_t kClients = 3;
  auto backend = factory();
  auto store = open(*backend);
  auto second = open(*backend);
  std::vector<ClientId> clients;
  for (size_t i = 0; i < kClients; ++i) clients.push_back(add(*store, "hash-" + std::to_string(i)));
  const JobId job = create(*store, job_record("j"), "blob-0");
  auto blob_of = [](uint64_t version) { return "blob-" + std::to_string(version); };
  auto fails = [](RoundIndex index) { return index % 4 == 0; };

  std::atomic<bool> done{false};
  std::mutex errors_mu;
  std::vector<std::string> errors;
  auto error = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(errors_mu);
    if (errors.size() < 20) errors.push_back(what);
  };
  Status written;
  std::thread writer([&] {
    for (RoundIndex r = 1; r <= kRounds && written.ok(); ++r) {
      written = store->open_round(open_round_record(job, r, clients));
      for (size_t i = 0; i < kClients && written.ok(); ++i) {
        written =
            store->admit_update({job, r, clients[i], {{"samples", i}}, 100.0 * r + i}).status();
      }
      if (!written.ok()) break;
      const RoundRecord done_round =
          closed(open_round_record(job, r, clients), 100.0 * r + 50, {{"updates", kClients}});
      written = fails(r) ? store->fail_round(done_round)
                         : store->commit_round(done_round, {job, r, blob_of(r), "sum", "", 1.0},
                                               {{"round", r}});
    }
    done = true;
  });
  auto read = [&](Store& s) {
    uint64_t last_latest = 0;
    size_t last_rounds = 0;
    bool last_pass = false;
    while (!last_pass) {
      last_pass = done.load();
      auto rounds = s.list_rounds(job);
      if (!rounds.ok()) return error("list_rounds: " + rounds.status().to_string());
      if (rounds->size() < last_rounds) return error("rounds disappeared");
      last_rounds = rounds->size();
      RoundIndex max_committed = 0;
      for (size_t i = 0; i < rounds->size(); ++i) {
        const RoundRecord& r = rounds->at(i);
        if (r.index != i + 1) return error("rounds out of order");
        if (r.state == RoundState::kOpen) continue;
        // A concluded round had all its updates recorded before it concluded.
        auto ups = s.list_updates(job, r.index);
        if (!ups.ok()) return error("list_updates: " + ups.status().to_string());
        if (ups->size() != kClients) return error("a concluded round lacks updates");
        auto m = s.get_model(job, r.index);
        if (r.state == RoundState::kFailed) {
          if (m.ok() || m.status().code() != Code::kNotFound)
            return error("a failed round's model");
          continue;
        }
        if (!m.ok()) return error("a committed round without its model: " + m.status().to_string());
        if (m->blob != blob_of(r.index)) return error("a torn model");
        if (r.metrics != json{{"updates", kClients}}) return error("a committed round's metrics");
        max_committed = r.index;
      }
      auto latest = s.latest_model(job);
      if (!latest.ok()) return error("latest_model: " + latest.status().to_string());
      if (latest->version < max_committed || latest->version < last_latest) {
        return error("latest_model went back");
      }
      if (latest->blob != blob_of(latest->version)) return error("a torn latest model");
      last_latest = latest->version;
      auto j = s.get_job(job);
      if (!j.ok()) return error("get_job: " + j.status().to_string());
      if (max_committed > 0 && j->policy_state.value("round", RoundIndex{0}) < max_committed) {
        return error("a commit's policy state came after its round");
      }
    }
    if (last_rounds != kRounds) error("a reader missed the last rounds");
  };
  std::vector<std::thread> readers;
  readers.emplace_back([&] { read(*store); });
  readers.emplace_back([&] { read(*store); });
  readers.emplace_back([&] { read(*second); });
  writer.join();
  for (auto& t : readers) t.join();
  CHECK_MESSAGE(written.ok(), written.to_string());
  for (const std::string& e : errors) FAIL_CHECK(e);
  CHECK(store->latest_model(job)->version == kRounds - 1);  // round 40 failed
  CHECK(second->get_job(job)->policy_state == json{{"round", kRounds - 1}});
}

void concurrent_writers(const BackendFactory& factory) {
  constexpr int kThreads = 4, kEach = 25;
  auto backend = factory();
  auto store = open(*backend);
  auto second = open(*backend);
  std::mutex mu;
  std::vector<ClientId> ids;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Store& s = t % 2 == 0 ? *store : *second;
      for (int i = 0; i < kEach; ++i) {
        auto id = s.add_client(client("hash-" + std::to_string(t) + "-" + std::to_string(i)));
        std::lock_guard<std::mutex> lock(mu);
        if (id.ok()) {
          ids.push_back(*id);
        } else {
          errors.push_back(id.status().to_string());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& e : errors) FAIL_CHECK(e);
  CHECK(std::set<ClientId>(ids.begin(), ids.end()).size() == kThreads * kEach);
  auto all = store->list_clients();
  REQUIRE(all.ok());
  CHECK(all->size() == kThreads * kEach);
  CHECK(std::is_sorted(all->begin(), all->end(),
                       [](const ClientRecord& x, const ClientRecord& y) { return x.id < y.id; }));
}

struct Case {
  const char* name;
  void (*run)(const BackendFactory&);
};

const Case kCases[] = {
    {"clients: ids, lookups, profile updates all or nothing, unique tokens", clients},
    {"jobs: created with their model and module, states, unknown ids", jobs},
    {"tenants: ids from 1, unique names and tokens, jobs remember their tenant", tenants},
    {"rounds: open once, conclude once, metrics merged into closed rounds", rounds},
    {"updates: one per client and round, of stored rounds and clients", updates},
    {"uploads: chunks in order, resumed or replaced, dropped with their round", uploads},
    {"models: by version and latest, versions skip failed rounds", models},
    {"models in pieces: versions sharing most bytes read back whole", large_models},
    {"commit_round is all or nothing", commit_round_atomic},
    {"create_job is all or nothing", create_job_atomic},
    {"everything survives reopening", survives_reopening},
    {"saved contacts: one batch a save, in order, the recent ones kept", contact_batches},
    {"secure rounds' used keys: kept per job, across reopening, for a window of rounds", used_keys},
    {"a second store on the database sees what the first committed", second_store_sees_commits},
    {"an older schema migrates and keeps its records", older_schema_migrates},
    {"a newer schema is refused and left as it was", newer_schema_refused},
    {"readers see whole commits while a writer writes", readers_while_a_writer_writes},
    {"concurrent writers get distinct ids", concurrent_writers},
};

}  // namespace

void check_store_contract(const BackendFactory& factory) {
  for (const Case& c : kCases) {
    SUBCASE(c.name) { c.run(factory); }
  }
  check_cluster_contract(factory);
}

}  // namespace fedcase::storage::contract
