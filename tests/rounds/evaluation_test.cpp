#include "rounds/evaluation.h"

#include <doctest/doctest.h>

#include <limits>

namespace fedcase::rounds {
namespace {

using nlohmann::json;

json report_json(json patch = json::object()) {
  json j = {{"model_version", 3},
            {"samples", 40},
            {"loss", 0.7},
            {"metrics", {{"accuracy", 0.8}, {"top5_accuracy", 0.95}}}};
  j.update(patch);  // replaces whole members: a patch's metrics are all the metrics
  return j;
}

TEST_CASE("an evaluation report parses its version, samples, loss and metrics") {
  auto r = parse_eval_report(report_json({{"sdk_field", "ignored"}}));
  REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  CHECK(r->model_version == 3);
  CHECK(r->samples == 40);
  CHECK(r->loss == 0.7);
  CHECK(r->metrics == std::map<std::string, double>{{"accuracy", 0.8}, {"top5_accuracy", 0.95}});
  auto bare = parse_eval_report({{"model_version", 0}, {"samples", 1}, {"loss", 0}});
  REQUIRE(bare.ok());
  CHECK(bare->metrics.empty());
  json sixteen = json::object();
  for (int i = 0; i < 16; ++i) sixteen["m" + std::to_string(i)] = 2.5;  // any value >= 0
  sixteen["m0"] = 1e9;
  CHECK(parse_eval_report(report_json({{"metrics", sixteen}})).ok());
  CHECK(parse_eval_report(report_json({{"metrics", {{std::string(64, 'a'), 1}}}})).ok());
}

TEST_CASE("an evaluation report with a bad field is refused, naming it") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  json seventeen = json::object();
  for (int i = 0; i < 17; ++i) seventeen["m" + std::to_string(i)] = 1;
  struct Case {
    json report;
    const char* names;
  };
  const Case cases[] = {
      {json::array(), "evaluation"},
      {json{{"samples", 1}, {"loss", 0}}, "model_version"},
      {json{{"model_version", 1}, {"loss", 0}}, "samples"},
      {json{{"model_version", 1}, {"samples", 1}}, "loss"},
      {report_json({{"model_version", -1}}), "model_version"},
      {report_json({{"model_version", "3"}}), "model_version"},
      {report_json({{"samples", 0}}), "samples"},
      {report_json({{"samples", 2.5}}), "samples"},
      {report_json({{"samples", 1'000'000'000'001}}), "samples"},
      {report_json({{"loss", -0.1}}), "loss"},
      {report_json({{"loss", nan}}), "loss"},
      {report_json({{"loss", inf}}), "loss"},
      {report_json({{"loss", "low"}}), "loss"},
      {report_json({{"metrics", json::array()}}), "metrics"},
      {report_json({{"metrics", {{"accuracy", 1.01}}}}), "metrics.accuracy"},
      {report_json({{"metrics", {{"accuracy", -0.01}}}}), "metrics.accuracy"},
      {report_json({{"metrics", {{"accuracy", nan}}}}), "metrics.accuracy"},
      {report_json({{"metrics", {{"f1", inf}}}}), "metrics.f1"},
      {report_json({{"metrics", {{"f1", -1}}}}), "metrics.f1"},
      {report_json({{"metrics", {{"f1", nullptr}}}}), "metrics.f1"},
      {report_json({{"metrics", {{"top-5", 0.5}}}}), "metrics"},
      {report_json({{"metrics", {{"", 0.5}}}}), "metrics"},
      {report_json({{"metrics", {{std::string(65, 'a'), 0.5}}}}), "metrics"},
      {report_json({{"metrics", seventeen}}), "metrics"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.report.dump());
    auto r = parse_eval_report(c.report);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find(c.names) != std::string::npos);
  }
}

TEST_CASE("a round's federated evaluation is the sample-weighted mean of its reports") {
  CHECK(federated_evaluation_json(4, {}).is_null());
  EvalReport a{4, 10, 1.0, {{"accuracy", 0.5}, {"f1", 0.2}}};
  EvalReport b{4, 30, 2.0, {{"accuracy", 0.9}}};
  const json e = federated_evaluation_json(4, {a, b});
  CHECK(e["model_version"] == 4);
  CHECK(e["clients"] == 2);
  CHECK(e["samples"] == 40);
  CHECK(e["loss"].get<double>() == doctest::Approx((10 * 1.0 + 30 * 2.0) / 40));
  CHECK(e["metrics"]["accuracy"].get<double>() == doctest::Approx((10 * 0.5 + 30 * 0.9) / 40));
  CHECK(e["metrics"]["f1"].get<double>() == doctest::Approx(0.2));  // only a reported it
  CHECK(e["metrics"].size() == 2);
}

TEST_CASE("the recorded accuracy of a round depends on the evaluation target") {
  const json metrics = {{"test_accuracy", 0.7},
                        {"federated_evaluation", {{"metrics", {{"accuracy", 0.6}}}}}};
  CHECK(recorded_accuracy(metrics, "server") == 0.7);
  CHECK(recorded_accuracy(metrics, "federated") == 0.6);
  CHECK_FALSE(recorded_accuracy(json::object(), "server"));
  CHECK_FALSE(recorded_accuracy(json::object(), "federated"));
  CHECK_FALSE(recorded_accuracy({{"federated_evaluation", 3}}, "federated"));
  CHECK_FALSE(
      recorded_accuracy({{"federated_evaluation", {{"metrics", {{"f1", 1}}}}}}, "federated"));
  CHECK_FALSE(recorded_accuracy({{"test_accuracy", "high"}}, "server"));
}

}  // namespace
}  // namespace fedcase::rounds
