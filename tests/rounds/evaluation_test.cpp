#include "rounds/evaluation.h"

#include <doctest/doctest.h>

namespace fedcase::rounds {
namespace {

using nlohmann::json;

TEST_CASE("a round's federated evaluation is the sample-weighted mean of its reports") {
  CHECK(federated_evaluation_json(4, {}).is_null());
  protocol::EvalReport a{4, 10, 1.0, {{"accuracy", 0.5}, {"f1", 0.2}}};
  protocol::EvalReport b{4, 30, 2.0, {{"accuracy", 0.9}}};
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
