#include "scheduling/round_plan.h"

#include <doctest/doctest.h>

using namespace fedcase;
using namespace fedcase::scheduling;

namespace {

ClientProfile client(ClientId id, double ms_per_sample, uint64_t dataset_size) {
  ClientProfile p;
  p.id = id;
  p.dataset_size = dataset_size;
  p.compute_ms_per_sample.fold(ms_per_sample, 0.3);
  p.cache_hit_ratio.fold(1.0, 0.3);  // no I/O
  return p;
}

}  // namespace

TEST_CASE("training params parse with documented defaults") {
  Result<TrainingParams> p = parse_training_params(nlohmann::json::object());
  REQUIRE(p.ok());
  CHECK(p->local_epochs == 1);
  CHECK(p->sample_budget == 0);
  CHECK(p->batch_size == 32);
  CHECK(p->learning_rate == 0.01);
  CHECK(p->deadline.mode == DeadlineMode::kPercentile);
  CHECK(p->deadline.percentile == 0.9);
  CHECK(p->deadline.slack == 1.5);
  CHECK(p->cache.budget_bytes == (4u << 20));
  CHECK(p->cache.repetition_factor == 1);
  CHECK(p->cache.repetition == protocol::Repetition::kFixed);

  Result<TrainingParams> full = parse_training_params(nlohmann::json::parse(R"({
      "local_epochs": 2, "sample_budget": 640, "batch_size": 64, "lr": 0.05,
      "deadline": {"mode": "fixed", "seconds": 120},
      "cache": {"budget_bytes": 1000000, "repetition_factor": 2, "repetition": "adaptive"},
      "priors": {"compute_ms_per_sample": 9}})"));
  REQUIRE(full.ok());
  CHECK(full->sample_budget == 640);
  CHECK(full->batch_size == 64);
  CHECK(full->learning_rate == 0.05);
  CHECK(full->deadline.mode == DeadlineMode::kFixed);
  CHECK(full->deadline.fixed_s == 120);
  CHECK(full->cache.budget_bytes == 1000000);
  CHECK(full->cache.repetition_factor == 2);
  CHECK(full->cache.repetition == protocol::Repetition::kAdaptive);
  CHECK(full->priors.compute_ms_per_sample == 9);
}

TEST_CASE("training params reject bad values and unknown keys") {
  CHECK_FALSE(parse_training_params({{"batch_size", 0}}).ok());
  CHECK_FALSE(parse_training_params({{"lr", -1}}).ok());
  CHECK_FALSE(parse_training_params({{"local_epochs", 0}}).ok());
  CHECK(parse_training_params({{"local_epochs", 0}, {"sample_budget", 100}}).ok());
  CHECK_FALSE(parse_training_params({{"epochs", 1}}).ok());
  CHECK_FALSE(parse_training_params({{"deadline", {{"mode", "soon"}}}}).ok());
  CHECK_FALSE(
      parse_training_params({{"deadline", {{"min_seconds", 10}, {"max_seconds", 5}}}}).ok());
  CHECK_FALSE(parse_training_params({{"cache", {{"repetition_factor", 0.5}}}}).ok());
  CHECK_FALSE(parse_training_params({{"priors", {{"sample_bytes", -1}}}}).ok());
  CHECK_FALSE(parse_training_params({{"sampling", "sometimes"}}).ok());
  CHECK_FALSE(parse_training_params({{"cache", {{"policy", "fifo"}}}}).ok());
  CHECK_FALSE(parse_training_params({{"cache", {{"repetition", "sometimes"}}}}).ok());
  CHECK_FALSE(parse_training_params({{"momentum", 1.5}}).ok());
  CHECK_FALSE(parse_training_params({{"prox_mu", -0.1}}).ok());
  Result<TrainingParams> typo = parse_training_params({{"deadline", {{"slak", 2}}}});
  REQUIRE_FALSE(typo.ok());
  CHECK(typo.status().message() == "unknown key training.deadline.slak");
}

TEST_CASE("tasks get samples, steps, cache directives and expected durations") {
  TrainingParams params;
  params.local_epochs = 2;
  params.batch_size = 32;
  params.learning_rate = 0.1;
  params.cache.budget_bytes = 1000;
  params.cache.repetition_factor = 3;
  ClientProfile a = client(1, 10, 100);
  ClientProfile b = client(2, 20, 0);  // dataset size unknown: one batch
  b.cache_capacity_bytes = 600;
  Result<RoundPlan> plan = plan_round(params, {&a, &b}, 0);
  REQUIRE(plan.ok());
  REQUIRE(plan->tasks.size() == 2);
  const ClientTask& ta = plan->tasks[0];
  CHECK(ta.client == 1);
  CHECK(ta.samples == 200);
  CHECK(ta.local_steps == 7);
  CHECK(ta.batch_size == 32);
  CHECK(ta.learning_rate == 0.1);
  CHECK(ta.cache.budget_bytes == 1000);
  CHECK(ta.cache.repetition_factor == 3);
  CHECK(ta.expected_duration_s == doctest::Approx(2.0));
  const ClientTask& tb = plan->tasks[1];
  CHECK(tb.samples == 32);
  CHECK(tb.local_steps == 1);
  CHECK(tb.cache.budget_bytes == 600);  // capped at the client's capacity

  params.sample_budget = 100;
  plan = plan_round(params, {&a}, 0);
  REQUIRE(plan.ok());
  CHECK(plan->tasks[0].samples == 100);
  CHECK(plan->tasks[0].local_steps == 4);
}

TEST_CASE("the deadline is fixed or a slack times a percentile of expected durations") {
  TrainingParams params;
  params.sample_budget = 100;
  ClientProfile a = client(1, 10, 0), b = client(2, 20, 0), c = client(3, 30, 0);  // 1, 2, 3 s
  params.deadline.mode = DeadlineMode::kPercentile;
  params.deadline.percentile = 0.5;  // index floor(0.5 * 3) = 1: 2 s
  params.deadline.slack = 1.5;
  params.deadline.min_s = 0;
  Result<RoundPlan> plan = plan_round(params, {&c, &a, &b}, 0);
  REQUIRE(plan.ok());
  CHECK(plan->deadline_s == doctest::Approx(3.0));
  params.deadline.min_s = 30;
  CHECK(plan_round(params, {&a, &b, &c}, 0)->deadline_s == 30);
  params.deadline.max_s = 40;
  params.deadline.min_s = 0;
  params.deadline.slack = 100;
  CHECK(plan_round(params, {&a, &b, &c}, 0)->deadline_s == 40);
  params.deadline.mode = DeadlineMode::kFixed;
  params.deadline.fixed_s = 77;
  CHECK(plan_round(params, {&a, &b, &c}, 0)->deadline_s == 77);
  CHECK_FALSE(plan_round(params, {}, 0).ok());
  CHECK_FALSE(plan_round(params, {&a, nullptr}, 0).ok());
}

TEST_CASE("candidates carry the profile and the expected duration of their task") {
  TrainingParams params;
  params.sample_budget = 100;
  ClientProfile a = client(9, 10, 0);
  Candidate c = make_candidate(a, true, params, 1250000);
  CHECK(c.id == 9);
  CHECK(c.available);
  CHECK(c.profile == &a);
  // 1 s compute, 1 s download and 2 s upload at the default priors (10 and 5 Mbit/s).
  CHECK(c.expected_duration_s == doctest::Approx(4.0));
  CHECK_FALSE(make_candidate(a, false, params, 0).available);
}

TEST_CASE("client optimizer, sampling and cache policy pass through to every task") {
  Result<TrainingParams> p = parse_training_params(
      {{"momentum", 0.9}, {"weight_decay", 1e-4}, {"prox_mu", 0.01}, {"sampling", "importance"},
       {"cache", {{"policy", "lru"}, {"repetition_factor", 2}}}});
  REQUIRE(p.ok());
  CHECK(parse_training_params(nlohmann::json::object())->sampling == protocol::Sampling::kUniform);
  CHECK(parse_training_params(nlohmann::json::object())->cache.policy ==
        protocol::CachePolicy::kImportance);
  ClientProfile profile;
  profile.id = 4;
  profile.dataset_size = 100;
  Result<RoundPlan> plan = plan_round(*p, {&profile}, 1000);
  REQUIRE(plan.ok());
  const ClientTask& task = plan->tasks.at(0);
  CHECK(task.momentum == 0.9);
  CHECK(task.weight_decay == 1e-4);
  CHECK(task.prox_mu == 0.01);
  CHECK(task.sampling == protocol::Sampling::kImportance);
  CHECK(task.cache.policy == protocol::CachePolicy::kLru);
  CHECK(task.cache.repetition_factor == 2);
}

TEST_CASE("the client's training settings are held to the ranges every SDK accepts") {
  auto error = [](const nlohmann::json& training) {
    Result<TrainingParams> p = parse_training_params(training);
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() == Code::kInvalidArgument);
    return p.status().message();
  };
  CHECK(error({{"batch_size", 0}}).find("training.batch_size") != std::string::npos);
  CHECK(error({{"batch_size", 65537}}).find("training.batch_size") != std::string::npos);
  CHECK(error({{"lr", 1001}}).find("training.lr") != std::string::npos);
  CHECK(error({{"weight_decay", -1}}).find("training.weight_decay") != std::string::npos);
  CHECK(error({{"prox_mu", 2e6}}).find("training.prox_mu") != std::string::npos);
  CHECK(error({{"sampling", "random"}}).find("training.sampling") != std::string::npos);
  CHECK(error({{"sampling", ""}}).find("training.sampling") != std::string::npos);
  CHECK(error({{"cache", {{"policy", "fifo"}}}}).find("training.cache.policy") !=
        std::string::npos);
  CHECK(parse_training_params({{"batch_size", 65536}, {"lr", 1000}}).ok());
}
