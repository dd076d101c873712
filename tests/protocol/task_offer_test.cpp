#include "protocol/task_offer.h"

#include <doctest/doctest.h>

#include <string>

#include "protocol/sampling.h"
#include "protocol/version.h"

namespace fedcase::protocol {
namespace {

using nlohmann::json;

TaskOffer offer() {
  TaskOffer t;
  t.job = 1;
  t.round = 4;
  t.model = "torchscript";
  t.loss = "cross_entropy";
  t.model_version = 3;
  t.model_checksum = std::string(64, 'a');
  t.module_checksum = std::string(64, 'b');
  t.module_url = "/v1/jobs/1/module";
  t.model_url = "/v1/jobs/1/models/3";
  t.upload_url = "/v1/jobs/1/rounds/4/update";
  t.status_url = "/v1/jobs/1/rounds/4/status";
  t.deadline = 1764432000.5;
  t.train = {1, 32, 0.05, 0.9, 1e-4, 0};
  t.evaluate = EvaluationSettings{0};
  t.sample_budget = 600;
  t.sampling = Sampling::kImportance;
  t.cache = {CachePolicy::kLru, 4194304, 1};
  t.expected_duration_s = 4.2;
  return t;
}

// The message of reading `task` after `patch` replaced (or, with null, removed) its members.
std::string error(json patch) {
  json task = write_task_offer(offer());
  for (const auto& item : patch.items()) {
    if (item.value().is_null()) {
      task.erase(item.key());
    } else {
      task[item.key()] = item.value();
    }
  }
  Result<TaskOffer> read = read_task_offer(task);
  REQUIRE_FALSE(read.ok());
  return read.status().message();
}

TEST_CASE("a secure task is a round's stages, a cohort's with its factor, or a ready task") {
  const json stages = {{"keys_url", "/k"},
                       {"shares_url", "/s"},
                       {"masked_input_url", "/m"},
                       {"unmask_url", "/u"},
                       {"stage_seconds", 10}};
  auto round = read_secagg_task(stages);
  REQUIRE(round.ok());
  CHECK_FALSE(round->ready());
  CHECK_FALSE(round->staleness_factor);
  json cohort = stages;
  cohort["staleness_factor"] = 0.25;
  CHECK(read_secagg_task(cohort)->staleness_factor == 0.25);
  for (double bad : {0.0, 1.5, -1.0}) {
    cohort["staleness_factor"] = bad;
    CHECK(read_secagg_task(cohort).status().message().find("staleness_factor") !=
          std::string::npos);
  }
  auto ready = read_secagg_task({{"ready_url", "/v1/jobs/1/rounds/4/ready"}, {"stage_seconds", 10}});
  REQUIRE(ready.ok());
  CHECK(ready->ready());
  CHECK(write_secagg_task(*ready) ==
        json{{"ready_url", "/v1/jobs/1/rounds/4/ready"}, {"stage_seconds", 10}});
  // Without a ready_url, every stage URL is required.
  CHECK_FALSE(read_secagg_task({{"keys_url", "/k"}, {"stage_seconds", 10}}).ok());
}

TEST_CASE("a task offer is written as docs/protocol.md shows it") {
  const json task = write_task_offer(offer());
  CHECK(task["protocol_version"] == kProtocolVersion);
  CHECK(task["job_id"] == 1);
  CHECK(task["train"] == json{{"epochs", 1},
                              {"batch_size", 32},
                              {"lr", 0.05},
                              {"momentum", 0.9},
                              {"weight_decay", 1e-4},
                              {"prox_mu", 0}});
  CHECK(task["sampling"] == "importance");
  CHECK(task["cache"] == json{{"policy", "lru"},
                              {"budget_bytes", 4194304},
                              {"repetition_factor", 1},
                              {"repetition", "fixed"}});
  CHECK(task["evaluate"] == json{{"max_samples", 0}});
  TaskOffer plain = offer();
  plain.module_checksum.clear();
  plain.module_url.clear();
  plain.evaluate.reset();
  const json without = write_task_offer(plain);
  CHECK_FALSE(without.contains("module_url"));
  CHECK_FALSE(without.contains("module_checksum"));
  CHECK_FALSE(without.contains("evaluate"));
  CHECK(read_task_offer(without)->module_checksum.empty());
}

TEST_CASE("a task offer with a missing or bad member is refused, naming it") {
  CHECK(error({{"protocol_version", nullptr}}) == "task.protocol_version is required");
  CHECK(error({{"train", nullptr}}) == "task.train is required");
  CHECK(error({{"status_url", nullptr}}) == "task.status_url is required");
  CHECK(error({{"round", 0}}).find("task.round") != std::string::npos);
  CHECK(error({{"model", ""}}).find("task.model") != std::string::npos);
  CHECK(error({{"model_checksum", std::string(64, 'A')}}).find("task.model_checksum") !=
        std::string::npos);
  CHECK(error({{"model_checksum", "abc"}}).find("task.model_checksum") != std::string::npos);
  CHECK(error({{"model_url", "http://elsewhere/x"}}).find("task.model_url") != std::string::npos);
  CHECK(error({{"upload_url", "/v1/a b"}}).find("task.upload_url") != std::string::npos);
  CHECK(error({{"upload_url", "/v1/\r\nX-Injected: 1"}}).find("task.upload_url") !=
        std::string::npos);
  CHECK(error({{"module_url", nullptr}}) == "task.module_url is required");
  CHECK(error({{"deadline", -1}}).find("task.deadline") != std::string::npos);
  CHECK(error({{"sampling", "random"}}).find("task.sampling") != std::string::npos);
  CHECK(error({{"sample_budget", -1}}).find("task.sample_budget") != std::string::npos);
  CHECK(error({{"train", {{"epochs", 1}}}}) == "task.train.batch_size is required");
  CHECK(error({{"train",
                {{"epochs", 1},
                 {"batch_size", 0},
                 {"lr", 0.1},
                 {"momentum", 0},
                 {"weight_decay", 0},
                 {"prox_mu", 0}}}})
            .find("task.train.batch_size") != std::string::npos);
  CHECK(error({{"train",
                {{"epochs", 1},
                 {"batch_size", 1},
                 {"lr", 0.1},
                 {"momentum", 1},
                 {"weight_decay", 0},
                 {"prox_mu", 0}}}}) == "task.train.momentum must be a number in [0, 1)");
  CHECK(error({{"cache", {{"policy", "fifo"}, {"budget_bytes", 1}, {"repetition_factor", 1}}}})
            .find("task.cache.policy") != std::string::npos);
  CHECK(error({{"cache", {{"policy", "lru"}, {"budget_bytes", 1}, {"repetition_factor", 0.5}}}})
            .find("task.cache.repetition_factor") != std::string::npos);
  CHECK(error({{"cache",
                {{"policy", "lru"},
                 {"budget_bytes", 1},
                 {"repetition_factor", 1},
                 {"repetition", "sometimes"}}}}) ==
        "task.cache.repetition must be \"fixed\" or \"adaptive\"");
  CHECK(error({{"evaluate", {{"max_samples", "all"}}}}).find("task.evaluate.max_samples") !=
        std::string::npos);
  CHECK(error({{"evaluate", json::object()}}) == "task.evaluate.max_samples is required");
}

TEST_CASE("a task's cache without a repetition rule, from an older coordinator, repeats fixed") {
  TaskOffer adaptive = offer();
  adaptive.cache.repetition = Repetition::kAdaptive;
  json task = write_task_offer(adaptive);
  CHECK(task["cache"]["repetition"] == "adaptive");
  CHECK(read_task_offer(task)->cache.repetition == Repetition::kAdaptive);
  task["cache"].erase("repetition");
  Result<TaskOffer> older = read_task_offer(task);
  REQUIRE(older.ok());
  CHECK(older->cache.repetition == Repetition::kFixed);
  CHECK(older->cache.repetition_factor == adaptive.cache.repetition_factor);
}

TEST_CASE("a task offer keeps what it does not know") {
  json task = write_task_offer(offer());
  task["a_newer_field"] = {{"x", 1}};
  Result<TaskOffer> read = read_task_offer(task);
  REQUIRE(read.ok());
  CHECK(*read == offer());
}

TEST_CASE("protocol version checks name both versions and who should upgrade") {
  CHECK(check_sdk_version(kProtocolVersion).ok());
  CHECK(check_task_version(kProtocolVersion).ok());
  Status newer = check_sdk_version(kProtocolVersion + 1);
  CHECK(newer.code() == Code::kUnprocessable);
  CHECK(newer.message() == "the SDK speaks protocol version " +
                               std::to_string(kProtocolVersion + 1) +
                               "; this coordinator serves protocol version " +
                               std::to_string(kProtocolVersion) + ": upgrade the coordinator");
  CHECK(check_sdk_version(0).message().find("upgrade the SDK") != std::string::npos);
  Status task = check_task_version(kProtocolVersion + 1);
  CHECK(task.code() == Code::kUnprocessable);
  CHECK(task.message() == "the task is written in protocol version " +
                              std::to_string(kProtocolVersion + 1) +
                              "; this SDK reads protocol version " +
                              std::to_string(kProtocolVersion) + ": upgrade the SDK");
  CHECK(check_task_version(0).message().find("upgrade the coordinator") != std::string::npos);
}

TEST_CASE("sampling modes and cache policies have one name each") {
  for (Sampling s : {Sampling::kUniform, Sampling::kImportance}) {
    auto parsed = parse_sampling(sampling_name(s));
    REQUIRE(parsed.ok());
    CHECK(*parsed == s);
  }
  for (CachePolicy p : {CachePolicy::kNone, CachePolicy::kLru, CachePolicy::kImportance}) {
    auto parsed = parse_cache_policy(cache_policy_name(p));
    REQUIRE(parsed.ok());
    CHECK(*parsed == p);
  }
  CHECK(std::string(sampling_name(Sampling::kImportance)) == "importance");
  CHECK(std::string(cache_policy_name(CachePolicy::kLru)) == "lru");
  CHECK(parse_sampling("random").status().code() == Code::kInvalidArgument);
  CHECK(parse_cache_policy("fifo").status().code() == Code::kInvalidArgument);
  for (Repetition r : {Repetition::kFixed, Repetition::kAdaptive}) {
    auto parsed = parse_repetition(repetition_name(r));
    REQUIRE(parsed.ok());
    CHECK(*parsed == r);
  }
  CHECK(parse_repetition("always").status().code() == Code::kInvalidArgument);
}

}  // namespace
}  // namespace fedcase::protocol
