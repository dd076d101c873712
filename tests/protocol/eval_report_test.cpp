#include "protocol/eval_report.h"

#include <doctest/doctest.h>

#include <limits>

namespace fedcase::protocol {
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
  auto r = read_eval_report(report_json({{"sdk_field", "ignored"}}));
  REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  CHECK(r->model_version == 3);
  CHECK(r->samples == 40);
  CHECK(r->loss == 0.7);
  CHECK(r->metrics == std::map<std::string, double>{{"accuracy", 0.8}, {"top5_accuracy", 0.95}});
  auto bare = read_eval_report({{"model_version", 0}, {"samples", 1}, {"loss", 0}});
  REQUIRE(bare.ok());
  CHECK(bare->metrics.empty());
  json sixteen = json::object();
  for (int i = 0; i < 16; ++i) sixteen["m" + std::to_string(i)] = 2.5;  // any value >= 0
  sixteen["m0"] = 1e9;
  CHECK(read_eval_report(report_json({{"metrics", sixteen}})).ok());
  CHECK(read_eval_report(report_json({{"metrics", {{std::string(64, 'a'), 1}}}})).ok());
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
    auto r = read_eval_report(c.report);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find(c.names) != std::string::npos);
  }
}

TEST_CASE("validate_eval_report applies the reader's rules to a value") {
  CHECK(validate_eval_report({3, 40, 0.7, {{"accuracy", 0.8}}}).ok());
  CHECK_FALSE(validate_eval_report({3, 0, 0.7, {}}).ok());
  CHECK_FALSE(validate_eval_report({3, 1, std::numeric_limits<double>::quiet_NaN(), {}}).ok());
  CHECK_FALSE(validate_eval_report({3, 1, 0.5, {{"accuracy", 1.5}}}).ok());
  CHECK_FALSE(validate_eval_report({3, 1, 0.5, {{"top-5", 0.5}}}).ok());
}

}  // namespace
}  // namespace fedcase::protocol
