#include "cli/format.h"

#include <doctest/doctest.h>

using namespace fedcase::cli;
using nlohmann::json;

namespace {

json smoothed(double mean, uint64_t count) { return {{"mean", mean}, {"count", count}}; }

json client(uint64_t id, json expected, double last_seen, bool profiled) {
  json profile = {{"id", id},
                  {"compute_ms_per_sample", smoothed(0.85, profiled ? 2 : 0)},
                  {"download_bytes_per_s", smoothed(12.5e6, profiled ? 2 : 0)},
                  {"upload_bytes_per_s", smoothed(950, profiled ? 2 : 0)},
                  {"cache_hit_ratio", smoothed(0.25, profiled ? 2 : 0)},
                  {"utility", profiled ? 412.345 : 0.0},
                  {"utility_round", profiled ? 2 : 0},
                  {"times_selected", profiled ? 3 : 0}};
  return {{"client_id", id},         {"info", json::object()},
          {"profile", profile},      {"expected_duration_s", expected},
          {"registered_at", 1000.0}, {"last_seen", last_seen},
          {"available", profiled}};
}

}  // namespace

TEST_CASE("tables align their columns and trim trailing spaces") {
  CHECK(render_table({"A", "LONG"}, {{"xyz", "1"}, {"", "22"}}) ==
        "A    LONG\n"
        "xyz  1\n"
        "     22\n");
  CHECK(render_table({}, {{"key", "v"}, {"k", ""}}) == "key  v\nk\n");
  CHECK(render_table({"ONLY"}, {}) == "ONLY\n");
}

TEST_CASE("ages, rates and numbers") {
  CHECK(format_age(-3) == "0s");
  CHECK(format_age(59.9) == "59s");
  CHECK(format_age(60) == "1m");
  CHECK(format_age(3599) == "59m");
  CHECK(format_age(7200) == "2h");
  CHECK(format_age(3 * 86400 + 5) == "3d");
  CHECK(format_rate(950) == "950.0 B/s");
  CHECK(format_rate(999.96) == "1.0 kB/s");
  CHECK(format_rate(12.5e6) == "12.5 MB/s");
  CHECK(format_rate(2e9) == "2.0 GB/s");
  CHECK(format_fixed(0.78912, 4) == "0.7891");
}

TEST_CASE("the jobs table") {
  json jobs = {{"jobs",
                {{{"job_id", 1},
                  {"name", "demo"},
                  {"model", "cnn"},
                  {"selection_policy", "fedcase"},
                  {"state", "running"},
                  {"model_version", 3},
                  {"model_checksum", "ab"},
                  {"round", 4},
                  {"round_open", true},
                  {"test_accuracy", 0.78912}},
                 {{"job_id", 12},
                  {"name", "second-job"},
                  {"model", "mlp"},
                  {"selection_policy", "random"},
                  {"state", "paused"},
                  {"model_version", 0},
                  {"model_checksum", "cd"},
                  {"round", 0},
                  {"round_open", false}}}}};
  CHECK(jobs_table(jobs) ==
        "ID  NAME        STATE    POLICY   MODEL  ROUND     MODEL VERSION  TEST ACCURACY\n"
        "1   demo        running  fedcase  cnn    4 (open)  3              0.7891\n"
        "12  second-job  paused   random   mlp    0         0              -\n");
  CHECK(job_line(jobs["jobs"][1]) == "job 12 \"second-job\": paused, round 0, model version 0\n");
  CHECK(jobs_table({{"jobs", json::array()}}) ==
        "ID  NAME  STATE  POLICY  MODEL  ROUND  MODEL VERSION  TEST ACCURACY\n");
  CHECK_THROWS_AS(jobs_table({{"jobs", {{{"job_id", 1}}}}}), json::exception);
  CHECK(job_state_line({{"job_id", 3}, {"state", "paused"}}) == "job 3 is paused\n");
}

TEST_CASE("the job detail and its rounds") {
  json detail = {
      {"job_id", 2},
      {"name", "dp"},
      {"state", "running"},
      {"model_version", 2},
      {"model_checksum", "ef"},
      {"round", 3},
      {"round_open", true},
      {"test_accuracy", 0.5},
      {"config", {{"model", "mlp"}, {"rounds", 10}, {"target_accuracy", 0.8}}},
      {"parameters", 101770},
      {"selection_policy", "fedcase"},
      {"aggregation", "fedavg"},
      {"server_optimizer", "fedavg"},
      {"privacy",
       {{"q", 1.0}, {"noise_multiplier", 1.1}, {"epsilon", 2.5}, {"delta", 1e-5}, {"rounds", 2}}},
      {"current_round", {{"round", 3}, {"invited", 5}, {"updates", 2}, {"deadline", 9.0}}},
      {"result", nullptr},
      {"rounds",
       {{{"round", 1},
         {"state", "committed"},
         {"selected", {1, 2, 3}},
         {"metrics",
          {{"updates", 2},
           {"dropped", {{"3", "not needed"}}},
           {"round_seconds", 6.21},
           {"test_accuracy", 0.41}}}},
        {{"round", 2},
         {"state", "failed"},
         {"selected", {1, 2}},
         {"metrics",
          {{"updates", 0},
           {"dropped", {{"1", "missed deadline"}, {"2", "missed deadline"}}},
           {"round_seconds", 60.0},
           {"failure", "deadline passed with 0 updates, 1 needed"}}}},
        {{"round", 3}, {"state", "open"}, {"selected", {1}}, {"metrics", nullptr}}}}};
  CHECK(job_detail_text(detail) ==
        "job 2 \"dp\"\n"
        "state             running\n"
        "model             mlp, 101770 parameters, version 2\n"
        "round             3 (open): 2 updates of 5 invited (at most 10)\n"
        "selection policy  fedcase\n"
        "aggregation       fedavg, server optimizer fedavg\n"
        "test accuracy     0.5000\n"
        "result            target 0.8000, not reached yet\n"
        "privacy           epsilon 2.500 at delta 1e-05 after 2 rounds (noise 1.1)\n"
        "rounds            3 (1 committed, 1 failed, 1 open)\n");
  CHECK(rounds_table(detail) ==
        "ROUND  STATE      SELECTED  UPDATES  DROPPED  SECONDS  TEST ACCURACY  FAILURE\n"
        "1      committed  3         2        1        6.2      0.4100\n"
        "2      failed     2         0        2        60.0     -              deadline passed "
        "with 0 updates, 1 needed\n"
        "3      open       1         -        -        -        -\n");

  detail["result"] = {{"model_version", 5}, {"round", 5}, {"test_accuracy", 0.81}};
  detail.erase("privacy");
  const std::string text = job_detail_text(detail);
  CHECK(text.find("reached by model version 5 (round 5, test accuracy 0.8100)") !=
        std::string::npos);
  CHECK(text.find("privacy") == std::string::npos);
}

TEST_CASE("the clients table, for every job or one") {
  json clients = {{"clients",
                   {client(1, {{"1", 4.25}, {"2", 7.0}}, 990, true),
                    client(2, {{"2", 3.0}}, 0, false), client(3, json::object(), 400, false)}}};
  CHECK(clients_table(clients, std::nullopt, 1000) ==
        "ID  AVAILABLE  LAST SEEN  EXPECTED       COMPUTE          DOWNLOAD   UPLOAD     CACHE HITS"
        "  UTILITY  SELECTED\n"
        "1   yes        10s ago    1:4.2s 2:7.0s  0.850 ms/sample  12.5 MB/s  950.0 B/s  25.0%     "
        "  412.35   3\n"
        "2   no         never      2:3.0s         -                -          -          -         "
        "  -        0\n"
        "3   no         10m ago    -              -                -          -          -         "
        "  -        0\n");
  CHECK(clients_table(clients, 1, 1000) ==
        "ID  AVAILABLE  LAST SEEN  EXPECTED  COMPUTE          DOWNLOAD   UPLOAD     CACHE HITS  "
        "UTILITY  SELECTED\n"
        "1   yes        10s ago    4.2s      0.850 ms/sample  12.5 MB/s  950.0 B/s  25.0%       "
        "412.35   3\n");
  json for_two = clients_for_job(clients, 2);
  REQUIRE(for_two["clients"].size() == 2);
  CHECK(for_two["clients"][0]["client_id"] == 1);
  CHECK(for_two["clients"][1]["client_id"] == 2);
  CHECK(clients_for_job(clients, 9)["clients"].empty());
}

TEST_CASE("the models table marks the latest and best versions") {
  const json reply = {
      {"job_id", 3},
      {"evaluation_target", "server"},
      {"bytes", 451234},
      {"parameters", 110000},
      {"latest", 2},
      {"best", 1},
      {"models",
       {{{"version", 0}, {"round", nullptr}, {"created_at", 100.0}, {"accuracy", nullptr}},
        {{"version", 1}, {"round", 1}, {"created_at", 130.0}, {"accuracy", 0.8123}},
        {{"version", 2}, {"round", 3}, {"created_at", 190.0}, {"accuracy", 0.75}}}}};
  CHECK(models_table(reply, 200.0) ==
        "job 3: latest version 2, best 1 by server accuracy; 451.2 KB a version (110000 "
        "parameters)\n"
        "VERSION   ROUND  ACCURACY  AGE\n"
        "0         -      -         1m\n"
        "1 best    1      0.8123    1m\n"
        "2 latest  3      0.7500    10s\n");
  json unscored = reply;
  unscored["best"] = nullptr;
  CHECK(models_table(unscored, 200.0).find("best - (nothing evaluated yet)") != std::string::npos);
  CHECK(format_bytes(999) == "999 B");
  CHECK(format_bytes(1500) == "1.5 KB");
  CHECK(format_bytes(64e6) == "64.0 MB");
}
