// Two tenants' jobs share one fleet over real HTTP: each sees and controls only its own jobs,
// a client holds one task at a time across both jobs, and under overload a submission beyond
// a tenant's running-job cap gets 429 with Retry-After while the running rounds complete.

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <map>
#include <set>

#include "client_sdk/fleet.h"
#include "tests/support/coordinator_harness.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

struct StoredRound {
  uint64_t job = 0, index = 0;
  double opened_at = 0, closed_at = 0;
  std::set<uint64_t> selected;
};

// Every closed round, and when each client's update arrived: (job, round, client) -> time.
void read_rounds(const std::string& path, std::vector<StoredRound>& rounds,
                 std::map<std::tuple<uint64_t, uint64_t, uint64_t>, double>& received) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  REQUIRE(sqlite3_prepare_v2(db,
                             "SELECT job_id, idx, opened_at, closed_at, selected FROM rounds "
                             "WHERE state != 'open'",
                             -1, &stmt, nullptr) == SQLITE_OK);
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    StoredRound r{uint64_t(sqlite3_column_int64(stmt, 0)),
                  uint64_t(sqlite3_column_int64(stmt, 1)),
                  sqlite3_column_double(stmt, 2),
                  sqlite3_column_double(stmt, 3),
                  {}};
    for (uint64_t c : json::parse(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 4)))) {
      r.selected.insert(c);
    }
    rounds.push_back(r);
  }
  sqlite3_finalize(stmt);
  REQUIRE(sqlite3_prepare_v2(db, "SELECT job_id, round_idx, client_id, received_at FROM updates",
                             -1, &stmt, nullptr) == SQLITE_OK);
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    received[{uint64_t(sqlite3_column_int64(stmt, 0)), uint64_t(sqlite3_column_int64(stmt, 1)),
              uint64_t(sqlite3_column_int64(stmt, 2))}] = sqlite3_column_double(stmt, 3);
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

json job(const std::string& name) {
  return {{"name", name},
          {"model", "mlp"},
          {"rounds", 4},
          {"clients_per_round", 3},
          {"selection", {{"overcommit", 1.0}}},
          {"training", {{"local_epochs", 1}, {"deadline", {{"mode", "fixed"}, {"seconds", 60}}}}}};
}

}  // namespace

TEST_CASE("tenants share a fleet: scoped access, one task per client, throttling under overload") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  Caller admin(port, kAdminToken);

  Reply bad = admin.post("/v1/admin/tenants", {{"name", "Team A!"}});
  CHECK(bad.status == 400);
  Reply a =
      admin.post("/v1/admin/tenants", {{"name", "team-a"}, {"limits", {{"max_running_jobs", 1}}}});
  REQUIRE(a.status == 201);
  Reply b = admin.post("/v1/admin/tenants", {{"name", "team-b"}, {"weight", 2}});
  REQUIRE(b.status == 201);
  CHECK(admin.post("/v1/admin/tenants", {{"name", "team-b"}}).status == 409);
  Caller team_a(port, a.body["token"].get<std::string>());
  Caller team_b(port, b.body["token"].get<std::string>());

  // Two jobs of three clients each on a fleet of four: the fleet is overloaded.
  Reply job_a = team_a.post("/v1/admin/jobs", job("a-job"));
  REQUIRE(job_a.status == 201);
  CHECK(job_a.body["tenant_id"] == a.body["tenant_id"]);
  Reply job_b = team_b.post("/v1/admin/jobs", job("b-job"));
  REQUIRE(job_b.status == 201);
  const std::string a_path = "/v1/admin/jobs/" + std::to_string(job_a.body["job_id"].get<int>());
  const std::string b_path = "/v1/admin/jobs/" + std::to_string(job_b.body["job_id"].get<int>());

  ml::Dataset slice = ml::head(fmnist_train(), 1200);
  auto fleet = client::Fleet::start(test_fleet(port, 4, slice));
  REQUIRE(fleet.ok());
  REQUIRE(wait_until([&] { return admin.get("/v1/admin/clients").body["total"] == 4; }, 30));

  // Over its cap of one running job while overloaded: 429 with Retry-After, nothing created.
  Reply refused = team_a.post("/v1/admin/jobs", job("a-second"));
  CHECK(refused.status == 429);
  CHECK(std::stoi(refused.response.header("retry-after")) >= 1);
  CHECK(refused.raw.find("overloaded") != std::string::npos);
  CHECK(admin.get("/v1/admin/jobs").body["jobs"].size() == 2);

  // Each tenant sees and controls only its own jobs; another's is 404, never 403.
  Reply listed = team_a.get("/v1/admin/jobs");
  REQUIRE(listed.status == 200);
  REQUIRE(listed.body["jobs"].size() == 1);
  CHECK(listed.body["jobs"][0]["name"] == "a-job");
  CHECK(team_a.get(b_path).status == 404);
  CHECK(team_a.post(b_path + "/pause", json::object()).status == 404);
  CHECK(team_b.get(b_path).status == 200);
  CHECK(team_a.get("/v1/admin/clients").status == 403);
  CHECK(team_a.get("/v1/admin/tenants").status == 403);
  CHECK(team_a.post("/v1/admin/tenants", {{"name", "mine"}}).status == 403);
  CHECK(team_a.get("/metrics").status == 403);

  json detail_a, detail_b;
  REQUIRE_MESSAGE(wait_until(
                      [&] {
                        detail_a = admin.get(a_path).body;
                        detail_b = admin.get(b_path).body;
                        return detail_a["state"] == "finished" && detail_b["state"] == "finished";
                      },
                      240),
                  detail_a.dump() << "\n"
                                  << detail_b.dump());
  (*fleet)->stop();
  CHECK(committed_rounds(detail_a).size() == 4);
  CHECK(committed_rounds(detail_b).size() == 4);
  // A tenant downloads its own job's models, never another's.
  const std::string a_model =
      "/v1/jobs/" + std::to_string(job_a.body["job_id"].get<int>()) + "/models/4";
  const std::string b_model =
      "/v1/jobs/" + std::to_string(job_b.body["job_id"].get<int>()) + "/models/4";
  CHECK(team_a.get(a_model).status == 200);
  CHECK(team_a.get(b_model).status == 404);
  CHECK(admin.post("/v1/admin/tenants", {{"name", "operator"}}).status == 400);

  // One task at a time: a client invited by two rounds that were open at once had delivered
  // its update to the earlier one before the later one opened.
  std::vector<StoredRound> rounds;
  std::map<std::tuple<uint64_t, uint64_t, uint64_t>, double> received;
  read_rounds(dir.file("fedcase.db"), rounds, received);
  size_t overlapping = 0;
  for (const StoredRound& first : rounds) {
    for (const StoredRound& later : rounds) {
      if (first.job == later.job || later.opened_at < first.opened_at) continue;
      if (later.opened_at >= first.closed_at) continue;
      ++overlapping;
      for (uint64_t client : later.selected) {
        if (!first.selected.count(client)) continue;
        auto update = received.find({first.job, first.index, client});
        CHECK_MESSAGE(update != received.end(), "client " << client << " held two tasks");
        if (update != received.end()) CHECK(update->second <= later.opened_at);
      }
    }
  }
  MESSAGE(overlapping << " pairs of rounds of the two jobs were open at the same time");

  // Both tenants were charged for what their rounds used.
  Reply tenants = admin.get("/v1/admin/tenants");
  REQUIRE(tenants.status == 200);
  double shares = 0;
  for (const json& t : tenants.body["tenants"]) {
    if (t["name"] == "team-a" || t["name"] == "team-b") {
      CHECK(t["client_seconds"].get<double>() > 0);
      CHECK(t["counter"].get<double>() > 0);
    }
    if (t["name"] == "team-a") CHECK(t["throttle_events"].get<int>() >= 1);
    if (t["name"] == "team-b") CHECK(t["weight"] == 2);
    shares += t["share"].get<double>();
  }
  CHECK(shares == doctest::Approx(1));
}
