// The operator's view of a live coordinator while a small fleet trains: GET /metrics (checked
// by promtool and against the admin API) and the dashboard in headless Chromium.

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "client_sdk/fleet.h"
#include "tests/support/browser.h"
#include "tests/support/coordinator_harness.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

constexpr const char* kMetricsToken = "test-metrics-token-0123456789";
constexpr size_t kClients = 4;

// Samples of an exposition text: "name{labels}" -> value.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

// Runs `command` through the shell; its exit status.
int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("metrics and the dashboard show a live coordinator's jobs, rounds and fleet") {
  TempDir dir;
  auto service =
      start_coordinator(dir, [](server::CoordinatorConfig& c) { c.metrics_token = kMetricsToken; });
  const uint16_t port = service->port();
  Caller admin(port, kAdminToken);
  json job_config = {{"name", "operator-view"},
                     {"model", "mlp"},
                     {"rounds", 3},
                     {"clients_per_round", kClients},
                     {"selection", {{"overcommit", 1.0}}},
                     {"training", {{"local_epochs", 1}, {"lr", 0.05}}}};
  Reply created = admin.post("/v1/admin/jobs", job_config);
  REQUIRE(created.status == 201);
  const int job = created.body["job_id"];
  const std::string job_path = "/v1/admin/jobs/" + std::to_string(job);

  ml::Dataset slice = ml::head(fmnist_train(), 2000);
  auto fleet = client::Fleet::start(test_fleet(port, kClients, slice));
  REQUIRE(fleet.ok());
  json detail;
  REQUIRE_MESSAGE(wait_until(
                      [&] {
                        detail = admin.get(job_path).body;
                        auto rounds = committed_rounds(detail);
                        // The evaluation is stored with its round before the job's figure
                        // is published: wait for both.
                        return detail.value("state", "") == "finished" && rounds.size() == 3 &&
                               rounds.back()["metrics"].contains("test_accuracy") &&
                               detail.value("test_accuracy", -1.0) ==
                                   rounds.back()["metrics"]["test_accuracy"].get<double>();
                      },
                      240),
                  detail.dump());
  // The fleet stays connected (heartbeats and polls) while the operator looks.

  {
    INFO("the dashboard signs in, refuses a wrong token, shows jobs, curves and the fleet");
    Browser browser(dir);
    const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/dashboard/";
    browser.navigate(url);
    REQUIRE(
        browser.wait_for("document.getElementById('signin') && "
                         "!document.getElementById('signin').hidden",
                         30));
    auto sign_in = [&](const std::string& token) {
      browser.evaluate("document.getElementById('token').value = " + json(token).dump() +
                       "; document.getElementById('signin-form').requestSubmit(); true");
    };

    sign_in("not-the-admin-token-0123456789");
    CHECK(browser.wait_for(
        "document.getElementById('signin-error').textContent.includes('did not accept')", 15));
    CHECK(browser.evaluate("document.querySelectorAll('#jobs-rows tr').length") == 0);
    CHECK(browser.evaluate("document.getElementById('view-jobs').hidden") == true);

    sign_in(kAdminToken);
    REQUIRE(browser.wait_for("document.querySelectorAll('#jobs-rows tr').length === 1", 15));
    const std::string jobs_text =
        browser.evaluate("document.getElementById('jobs-rows').textContent");
    CHECK(jobs_text.find("operator-view") != std::string::npos);
    CHECK(jobs_text.find("finished") != std::string::npos);
    // The page updates itself: a refresh lands within a few seconds without a reload.
    const std::string stamp = browser.evaluate("document.getElementById('status').textContent");
    CHECK(browser.wait_for(
        "document.getElementById('status').textContent !== " + json(stamp).dump(), 10));
    // The token is kept in the tab's session only, never in the URL.
    CHECK(browser.evaluate("location.href") == url);
    CHECK(browser.evaluate("localStorage.length") == 0);
    CHECK(browser.evaluate("sessionStorage.getItem('fedcase.token')") == kAdminToken);

    browser.evaluate("location.hash = '#/jobs/" + std::to_string(job) + "'; true");
    CHECK(browser.wait_for("Number(document.getElementById('chart-accuracy').dataset.points) >= 2",
                           15));
    CHECK(browser.wait_for("document.querySelectorAll('#rounds-rows tr').length === 3", 15));
    CHECK(browser.evaluate("Number(document.getElementById('chart-updates').dataset.points)") == 3);
    CHECK(browser.wait_for("document.querySelectorAll('#models-rows tr').length === 4", 15));
    browser.screenshot(std::string(FEDCASE_ARTIFACT_DIR) + "/dashboard-job.png");

    // A version downloads from the job page, with the token: the file the export route serves.
    const std::filesystem::path downloads = dir.file("downloads");
    std::filesystem::create_directories(downloads);
    browser.call("Browser.setDownloadBehavior",
                 {{"behavior", "allow"}, {"downloadPath", downloads.string()}});
    browser.evaluate(
        "document.querySelector('#models-rows tr[data-version=\"3\"] "
        "button[data-format=\"npz\"]').click(); true");
    const std::string expected = admin.get(job_path + "/models/3/export?format=npz").raw;
    const std::filesystem::path saved = downloads / ("job-" + std::to_string(job) + "-v3.npz");
    CHECK(wait_until(
        [&] {
          std::error_code ec;
          return std::filesystem::file_size(saved, ec) == expected.size() && !ec;
        },
        15));
    std::ifstream file(saved, std::ios::binary);
    CHECK(std::string(std::istreambuf_iterator<char>(file), {}) == expected);

    browser.evaluate("location.hash = '#/fleet'; true");
    CHECK(browser.wait_for(
        "document.querySelectorAll('#fleet-rows tr').length === " + std::to_string(kClients), 15));
    CHECK(browser.wait_for("document.getElementById('fleet-summary').textContent === '" +
                               std::to_string(kClients) + " clients'",
                           15));
    browser.screenshot(std::string(FEDCASE_ARTIFACT_DIR) + "/dashboard-fleet.png");

    browser.evaluate("location.hash = '#/tenants'; true");
    CHECK(browser.wait_for("document.querySelectorAll('#tenants-rows tr').length === 1", 15));
    CHECK(browser.evaluate("document.getElementById('tenants-rows').textContent")
              .get<std::string>()
              .find("operator") != std::string::npos);

  }

  {
    INFO("the dashboard's files: no token needed, one shared copy, revalidated by ETag");
    Caller anyone(port, "");
    Reply script = anyone.get("/dashboard/app.js");
    REQUIRE(script.status == 200);
    CHECK(script.response.header("content-type") == "text/javascript; charset=utf-8");
    CHECK(script.response.header("content-security-policy").find("script-src 'self'") !=
          std::string::npos);
    const std::string etag = script.response.header("etag");
    REQUIRE(etag.size() == 66);
    CHECK(anyone.call("GET", "/dashboard/app.js", "", {{"If-None-Match", etag}}).status == 304);
    CHECK(anyone.get("/").status == 302);
    CHECK(anyone.get("/dashboard/../config.json").status == 404);
    CHECK(anyone.call("POST", "/dashboard/", "{}").status == 405);
  }
  {
    INFO("GET /metrics: Prometheus text that promtool accepts, matching the admin API");
    Reply scrape = admin.get("/metrics");
    REQUIRE(scrape.status == 200);
    CHECK(scrape.response.header("content-type").find("text/plain; version=0.0.4") == 0);
    const std::string path = dir.file("metrics.txt");
    std::ofstream(path) << scrape.raw;
    CHECK_MESSAGE(
        run("promtool check metrics < " + path + " > " + dir.file("promtool.log") + " 2>&1") == 0,
        std::ifstream(dir.file("promtool.log")).rdbuf());

    auto s = samples(scrape.raw);
    const std::string id = std::to_string(job);
    size_t committed = 0, failed = 0;
    for (const json& r : detail["rounds"]) {
      committed += r["state"] == "committed";
      failed += r["state"] == "failed";
    }
    CHECK(s["fedcase_rounds_total{job=\"" + id + "\",outcome=\"committed\"}"] == committed);
    CHECK(s["fedcase_rounds_total{job=\"" + id + "\",outcome=\"failed\"}"] == failed);
    CHECK(s["fedcase_round_duration_seconds_count{outcome=\"committed\"}"] == committed);
    const double accepted = double((*fleet)->updates_accepted());
    CHECK(accepted >= 3 * kClients);
    CHECK(s["fedcase_updates_accepted_total"] == accepted);
    CHECK(s["fedcase_aggregation_fold_seconds_count"] == accepted);
    CHECK(s["fedcase_http_requests_total{route=\"/v1/jobs/{job}/rounds/{round}/update\",code="
            "\"200\"}"] == accepted);
    CHECK(s["fedcase_store_write_seconds_count{operation=\"commit_round\"}"] == committed);
    CHECK(s["fedcase_selection_seconds_count"] >= committed);
    CHECK(s["fedcase_http_requests_total{route=\"/v1/clients/register\",code=\"201\"}"] ==
          kClients);
    CHECK(s["fedcase_clients_registered"] == kClients);
    // The job finished: no job wants clients, so each is told to sleep as it checks in.
    CHECK(s["fedcase_clients_connected"] == 0);
    CHECK(s["fedcase_jobs{state=\"finished\"}"] == 1);
    CHECK(s["fedcase_job_test_accuracy{job=\"" + id + "\"}"] ==
          doctest::Approx(detail["test_accuracy"].get<double>()));
    CHECK(s["fedcase_http_received_bytes_total"] > 0);
    CHECK(s["fedcase_http_sent_bytes_total"] > 0);
    CHECK(s["fedcase_http_open_connections"] >= 1);  // this scrape's at least
    // The fleet listing pages, sorts and filters on the coordinator, over real query strings.
    Reply page = admin.get("/v1/admin/clients?limit=2&sort=client_id&order=desc");
    REQUIRE(page.status == 200);
    CHECK(page.body["total"] == kClients);
    CHECK(page.body["matched"] == kClients);
    REQUIRE(page.body["clients"].size() == 2);
    CHECK(page.body["clients"][0]["client_id"].get<int>() >
          page.body["clients"][1]["client_id"].get<int>());
    Reply none = admin.get("/v1/admin/clients?search=%22no%20such%20device%22&available=true");
    REQUIRE(none.status == 200);
    CHECK(none.body["matched"] == 0);
    CHECK(none.body["clients"].empty());
    // "dataset_size", in every client's registration, with its first letter percent-encoded.
    Reply decoded = admin.get("/v1/admin/clients?search=%64ataset_size");
    REQUIRE(decoded.status == 200);
    CHECK(decoded.body["matched"] == kClients);
    CHECK(admin.get("/v1/admin/clients?limit=5000").status == 400);
    CHECK(admin.get("/v1/admin/clients?sort=token_hash").status == 400);
    // No client id becomes a label.
    CHECK(scrape.raw.find("client_id") == std::string::npos);
    CHECK(scrape.raw.find("client=") == std::string::npos);

    // Who may read it: the admin and the metrics token; nobody else, and that token nothing else.
    Caller scraper(port, kMetricsToken);
    CHECK(scraper.get("/metrics").status == 200);
    CHECK(scraper.get("/v1/admin/jobs").status == 403);
    CHECK(Caller(port, "").get("/metrics").status == 401);
    Caller enrollment(port, kEnrollmentToken);
    Reply registered = enrollment.post("/v1/clients/register", {{"dataset_size", 10}});
    REQUIRE(registered.status == 201);
    Caller client(port, registered.body["token"].get<std::string>());
    CHECK(client.get("/metrics").status == 403);
  }

  {
    INFO("an asynchronous job's page shows its mode and the staleness of each version");
    json async_job = job_config;
    async_job["name"] = "operator-async";
    async_job["mode"] = "async";
    async_job["clients_per_round"] = 2;
    async_job["async"] = {{"concurrency", 4}};
    Reply async_created = admin.post("/v1/admin/jobs", async_job);
    REQUIRE_MESSAGE(async_created.status == 201, async_created.raw);
    const std::string async_id = std::to_string(async_created.body["job_id"].get<int>());
    REQUIRE(wait_until(
        [&] { return admin.get("/v1/admin/jobs/" + async_id).body.value("state", "") == "finished"; },
        120));
    TempDir profile;  // a fresh profile: the first browser's may still be closing
    Browser browser(profile);
    browser.navigate("http://127.0.0.1:" + std::to_string(port) + "/dashboard/#/jobs/" + async_id);
    REQUIRE(browser.wait_for(
        "document.getElementById('signin') && !document.getElementById('signin').hidden", 30));
    browser.evaluate("document.getElementById('token').value = " + json(kAdminToken).dump() +
                     "; document.getElementById('signin-form').requestSubmit(); true");
    CHECK(browser.wait_for("!document.getElementById('staleness-figure').hidden", 15));
    CHECK(browser.wait_for(
        "Number(document.getElementById('chart-staleness').dataset.points) === 3", 15));
    CHECK(browser.evaluate("document.getElementById('job-facts').textContent")
              .get<std::string>()
              .find("mode: async: buffers of 2, 4 training at once") != std::string::npos);
    browser.screenshot(std::string(FEDCASE_ARTIFACT_DIR) + "/dashboard-async-job.png");
  }

  (*fleet)->stop();
}
