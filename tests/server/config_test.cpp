#include <doctest/doctest.h>

#include <cstdlib>
#include <stdexcept>

#include "server/config.h"

using namespace fedcase;
using namespace fedcase::server;
using nlohmann::json;

namespace {
const json kTokens = {{"admin_token", "admin-token-0123456789"},
                      {"enrollment_token", "enroll-token-0123456789"}};
}

TEST_CASE("coordinator config fills defaults and names the bad key") {
  CoordinatorConfig c = parse_coordinator_config(kTokens);
  CHECK(c.listen_address == "127.0.0.1");
  CHECK(c.max_upload_bytes == 64u << 20);
  json bad = kTokens;
  bad["port"] = 70000;
  CHECK_THROWS_WITH_AS(parse_coordinator_config(bad), doctest::Contains("port"),
                       std::runtime_error);
  bad = kTokens;
  bad["read_timeout_s"] = "soon";
  CHECK_THROWS_WITH_AS(parse_coordinator_config(bad), doctest::Contains("read_timeout_s"),
                       std::runtime_error);
  bad = kTokens;
  bad["max_conections"] = 5;  // a typo is refused, not ignored
  CHECK_THROWS_WITH_AS(parse_coordinator_config(bad), doctest::Contains("max_conections"),
                       std::runtime_error);
  bad = kTokens;
  bad["io_threads"] = 0;
  CHECK_THROWS_WITH_AS(parse_coordinator_config(bad), doctest::Contains("io_threads"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(parse_coordinator_config(json::object()),
                       doctest::Contains("at least 16 characters"), std::runtime_error);
  json same = {{"admin_token", "same-token-0123456789"}, {"enrollment_token", "same-token-0123456789"}};
  CHECK_THROWS_AS(parse_coordinator_config(same), std::runtime_error);
  CHECK_THROWS_WITH_AS(load_coordinator_config("/nonexistent.json"), doctest::Contains("cannot read"),
                       std::runtime_error);
}

TEST_CASE("environment tokens override the config file") {
  setenv("FEDCASE_ADMIN_TOKEN", "from-environment-0123456789", 1);
  CoordinatorConfig c = parse_coordinator_config(kTokens);
  unsetenv("FEDCASE_ADMIN_TOKEN");
  CHECK(c.admin_token == "from-environment-0123456789");
  CHECK(c.enrollment_token == "enroll-token-0123456789");
}

TEST_CASE("job config sections are parsed by the libraries that own them") {
  auto job = parse_job_config({{"name", "j"},
                               {"clients_per_round", 4},
                               {"selection", {{"policy", "fedcase"}, {"overcommit", 1.5}}},
                               {"training", {{"lr", 0.1}, {"momentum", 0.5}}},
                               {"aggregation", {{"rule", "trimmed_mean"}, {"trim_beta", 0.25}}},
                               {"server_optimizer", {{"name", "fedadam"}}}});
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  CHECK(job->overcommit == 1.5);
  CHECK(job->min_clients == 4);  // defaults to K
  CHECK(job->training.learning_rate == 0.1);
  CHECK(job->training.momentum == 0.5);
  CHECK(job->aggregation.rule == "trimmed_mean");
  CHECK(job->aggregation.trim_beta == 0.25);
}

TEST_CASE("job config errors name what is wrong") {
  auto message = [](const json& j) {
    auto r = parse_job_config(j);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    return r.status().message();
  };
  CHECK(message(json::array()).find("must be an object") != std::string::npos);
  CHECK(message({{"model", "cnn"}}).find("name") != std::string::npos);
  CHECK(message({{"name", "j"}, {"model", "resnet"}}).find("model") != std::string::npos);
  CHECK(message({{"name", "j"}, {"rounds", 0}}).find("rounds") != std::string::npos);
  CHECK(message({{"name", "j"}, {"clients_per_round", 2}, {"min_updates", 3}})
            .find("min_updates") != std::string::npos);
  CHECK(message({{"name", "j"}, {"round_deadline", 3}}).find("round_deadline") != std::string::npos);
  CHECK(message({{"name", "j"}, {"training", {{"batch_size", 0}}}}).find("batch_size") !=
        std::string::npos);
  CHECK(message({{"name", "j"}, {"selection", {{"policy", "best"}}}}).find("best") !=
        std::string::npos);
  CHECK(message({{"name", "j"}, {"aggregation", {{"rule", "mode"}}}}).find("mode") !=
        std::string::npos);
  CHECK(message({{"name", "j"}, {"server_optimizer", {{"name", "sgdx"}}}}).find("sgdx") !=
        std::string::npos);
  CHECK(message({{"name", "j"},
                 {"clients_per_round", 20},
                 {"aggregation", {{"rule", "median"}, {"max_buffered_updates", 10}}}})
            .find("max_buffered_updates") != std::string::npos);
}
