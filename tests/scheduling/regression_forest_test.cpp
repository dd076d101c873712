#include "scheduling/regression_forest.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace fedcase;
using namespace fedcase::scheduling;

namespace {

// x = 0, 1, ..., 19 in one feature; the target steps from 1 to 5 between x = 9 and x = 10.
struct StepData {
  std::vector<std::vector<double>> rows;
  std::vector<double> targets;
  StepData() {
    for (int x = 0; x < 20; ++x) {
      rows.push_back({static_cast<double>(x)});
      targets.push_back(x < 10 ? 1.0 : 5.0);
    }
  }
};

}  // namespace

TEST_CASE("a regression forest fits a step function") {
  const StepData step;
  Result<RegressionForest> forest = RegressionForest::fit(step.rows, step.targets, {}, 1);
  REQUIRE(forest.ok());
  // Each tree's first split is at the step (it leaves no error), halfway between the nearest
  // rows its sample drew on either side, and its leaves are pure. Away from the step every
  // tree agrees.
  for (double x : {0.0, 3.0, 5.0}) CHECK(forest->predict({x}) == doctest::Approx(1.0));
  for (double x : {14.0, 16.0, 19.0}) CHECK(forest->predict({x}) == doctest::Approx(5.0));
  // Beyond the rows, as at the nearest end.
  CHECK(forest->predict({-1e9}) == doctest::Approx(1.0));
  CHECK(forest->predict({std::numeric_limits<double>::infinity()}) == doctest::Approx(5.0));
  // At the step the trees' thresholds differ with their samples; their mean lies between.
  const double at_step = forest->predict({9.5});
  CHECK(at_step > 1.0);
  CHECK(at_step < 5.0);
}

TEST_CASE("a regression forest of a constant target predicts the constant") {
  const std::vector<std::vector<double>> rows = {{1, 7}, {2, 3}, {3, 9}, {4, 1}, {5, 5}};
  const std::vector<double> targets(rows.size(), 0.3);
  Result<RegressionForest> forest = RegressionForest::fit(rows, targets, {}, 2);
  REQUIRE(forest.ok());
  for (const auto& x : {std::vector<double>{0, 0}, {2.5, 8}, {10, -10}}) {
    CHECK(forest->predict(x) == doctest::Approx(0.3));
  }
}

TEST_CASE("a regression forest is fixed by its seed") {
  // A noisy target, so that different bootstrap samples give different forests.
  std::vector<std::vector<double>> rows;
  std::vector<double> targets;
  for (int i = 0; i < 40; ++i) {
    const double x = i, y = (i * 7) % 11;
    rows.push_back({x, y, x / (y + 1)});
    targets.push_back(std::sin(x) + 0.1 * y);
  }
  const std::vector<double> probe = {13.5, 4, 2.2};
  Result<RegressionForest> a = RegressionForest::fit(rows, targets, {}, 42);
  Result<RegressionForest> b = RegressionForest::fit(rows, targets, {}, 42);
  Result<RegressionForest> c = RegressionForest::fit(rows, targets, {}, 43);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  CHECK(a->predict(probe) == b->predict(probe));
  CHECK(a->predict(probe) != c->predict(probe));
}

TEST_CASE("a regression forest keeps to its depth and leaf size") {
  const StepData step;
  ForestParams stump;
  stump.max_depth = 0;
  Result<RegressionForest> leaf = RegressionForest::fit(step.rows, step.targets, stump, 3);
  REQUIRE(leaf.ok());
  // One leaf per tree: every x gets the same mean of the bootstrap samples.
  CHECK(leaf->predict({0}) == leaf->predict({19}));
  ForestParams big_leaves;
  big_leaves.min_leaf = 11;  // no split of 20 draws leaves 11 on each side
  Result<RegressionForest> unsplit = RegressionForest::fit(step.rows, step.targets, big_leaves, 3);
  REQUIRE(unsplit.ok());
  CHECK(unsplit->predict({0}) == unsplit->predict({19}));
}

TEST_CASE("a regression forest refuses rows it cannot fit") {
  const std::vector<double> one = {1};
  CHECK_FALSE(RegressionForest::fit({}, {}, {}, 1).ok());
  CHECK_FALSE(RegressionForest::fit({{1}, {2}}, one, {}, 1).ok());
  CHECK_FALSE(RegressionForest::fit({{}}, one, {}, 1).ok());
  CHECK_FALSE(RegressionForest::fit({{1, 2}, {3}}, {1, 2}, {}, 1).ok());
  CHECK_FALSE(RegressionForest::fit({{std::nan("")}}, one, {}, 1).ok());
  CHECK_FALSE(RegressionForest::fit({{1}}, {std::numeric_limits<double>::infinity()}, {}, 1).ok());
  ForestParams no_trees;
  no_trees.trees = 0;
  CHECK_FALSE(RegressionForest::fit({{1}}, one, no_trees, 1).ok());
  ForestParams no_leaf;
  no_leaf.min_leaf = 0;
  CHECK_FALSE(RegressionForest::fit({{1}}, one, no_leaf, 1).ok());
  ForestParams no_features;
  no_features.features_per_split = 0;
  CHECK_FALSE(RegressionForest::fit({{1}}, one, no_features, 1).ok());
  CHECK(RegressionForest::fit({{1}}, one, {}, 1).ok());
}
