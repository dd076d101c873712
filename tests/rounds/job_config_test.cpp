#include "rounds/job_config.h"

#include <doctest/doctest.h>

namespace fedcase::rounds {
namespace {

using nlohmann::json;

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
  auto described = parse_job_config({{"name", "j"}, {"description", "why this job"}});
  REQUIRE(described.ok());
  CHECK(described->description == "why this job");
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
  CHECK(message({{"name", "j"}, {"description", std::string(4097, 'd')}}).find("description") !=
        std::string::npos);
  CHECK(message({{"name", "j"}, {"model", "resnet"}}).find("model") != std::string::npos);
  CHECK(message({{"name", "j"}, {"rounds", 0}}).find("rounds") != std::string::npos);
  CHECK(
      message({{"name", "j"}, {"clients_per_round", 2}, {"min_updates", 3}}).find("min_updates") !=
      std::string::npos);
  CHECK(message({{"name", "j"}, {"round_deadline", 3}}).find("round_deadline") !=
        std::string::npos);
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

}  // namespace
}  // namespace fedcase::rounds
