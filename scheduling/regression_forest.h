#pragma once
// A regression forest (Breiman's random forest with a numeric target): each tree is grown on a
// bootstrap sample of the rows, each split takes the threshold that removes the most squared
// error on features drawn at random, and the forest predicts the mean of its trees' leaves.
// Pure logic. Every random draw comes from the seed and no std distribution is involved, so
// the same rows, parameters and seed give the same forest on every platform. A fitted forest
// is immutable: predict() may be called from several threads at once.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"

namespace fedcase::scheduling {

struct ForestParams {
  size_t trees = 32;
  size_t max_depth = 6;  // splits from the root to a leaf; 0 makes every tree one leaf
  size_t min_leaf = 2;   // bootstrap draws every leaf keeps at least (repeats count)
  // Features a split compares: the first this many, in a random order, that can split the
  // node. 1 is Breiman's width / 3 for a width of up to 5.
  size_t features_per_split = 1;
};

class RegressionForest {
 public:
  // Fits targets[i] on rows[i]. kInvalidArgument for no rows, a target count other than the
  // row count, rows of zero or differing width, a non-finite value, or a `trees`, `min_leaf`
  // or `features_per_split` of 0.
  static Result<RegressionForest> fit(const std::vector<std::vector<double>>& rows,
                                      const std::vector<double>& targets,
                                      const ForestParams& params, uint64_t seed);

  // The mean over the trees of the mean target of the leaf `x` falls in, so within the
  // targets' range up to rounding. A split sends x left when x[feature] <= threshold, so each
  // tree treats a value beyond the fitted rows' range (an infinity too) as that range's nearest
  // end. Precondition: x has the width of the fitted rows and no NaN.
  double predict(const std::vector<double>& x) const;

 private:
  friend class TreeGrower;  // grows the trees (regression_forest.cpp)
  struct Node {
    double value = 0;      // the mean target of the node's draws
    double threshold = 0;  // split nodes only
    size_t feature = 0;    // split nodes only
    size_t left = 0;       // 0: a leaf (the root, at 0, is nobody's child)
    size_t right = 0;
  };

  explicit RegressionForest(std::vector<std::vector<Node>> trees) : trees_(std::move(trees)) {}

  std::vector<std::vector<Node>> trees_;  // each tree's nodes, its root first
};

}  // namespace fedcase::scheduling
