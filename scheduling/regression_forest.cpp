#include "scheduling/regression_forest.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "scheduling/rng.h"

namespace fedcase::scheduling {

// Grows one tree at a time on bootstrap draws (positions into the rows), depth first.
class TreeGrower {
 public:
  using Node = RegressionForest::Node;

  TreeGrower(const std::vector<std::vector<double>>& rows, const std::vector<double>& targets,
             const ForestParams& params, Rng& rng)
      : rows_(rows), targets_(targets), params_(params), rng_(rng) {}

  std::vector<Node> grow(std::vector<size_t> draws) {
    nodes_.clear();
    grow_node(draws.begin(), draws.end(), 0);
    return std::move(nodes_);
  }

 private:
  using Draw = std::vector<size_t>::iterator;

  struct Split {
    size_t feature;
    double threshold;
    // sum_left^2 / n_left + sum_right^2 / n_right: the squared error the split removes, up
    // to a constant of the node.
    double score;
  };

  // Appends the node of draws [begin, end) and its subtree; returns the node's position.
  size_t grow_node(Draw begin, Draw end, size_t depth) {
    const size_t at = nodes_.size();
    nodes_.emplace_back();
    const size_t n = static_cast<size_t>(end - begin);
    double sum = 0, lo = targets_[*begin], hi = lo;
    for (Draw d = begin; d != end; ++d) {
      sum += targets_[*d];
      lo = std::min(lo, targets_[*d]);
      hi = std::max(hi, targets_[*d]);
    }
    nodes_[at].value = sum / static_cast<double>(n);
    if (depth >= params_.max_depth || n < 2 * params_.min_leaf || lo == hi) return at;
    const std::optional<Split> split = best_split(begin, end, sum);
    if (!split) return at;
    const Draw middle = std::stable_partition(
        begin, end, [&](size_t row) { return rows_[row][split->feature] <= split->threshold; });
    const size_t left = grow_node(begin, middle, depth + 1);
    const size_t right = grow_node(middle, end, depth + 1);
    Node& node = nodes_[at];  // taken after the children: growing them moves the nodes
    node.feature = split->feature;
    node.threshold = split->threshold;
    node.left = left;
    node.right = right;
    return at;
  }

  // The best split among the first features_per_split features, in a random order, that can
  // split the draws; nullopt when none can.
  std::optional<Split> best_split(Draw begin, Draw end, double sum) {
    const size_t width = rows_[0].size();
    std::vector<size_t> features(width);
    std::iota(features.begin(), features.end(), size_t{0});
    std::optional<Split> best;
    size_t compared = 0;
    for (size_t k = 0; k < width && compared < params_.features_per_split; ++k) {
      // One Fisher-Yates step at a time: only the features looked at cost a draw.
      std::swap(features[k], features[k + rng_.below(width - k)]);
      const std::optional<Split> split = best_split_on(features[k], begin, end, sum);
      if (!split) continue;
      ++compared;
      if (!best || split->score > best->score) best = split;
    }
    return best;
  }

  // The threshold on `feature` that removes the most squared error while leaving min_leaf
  // draws on each side; thresholds lie halfway between distinct values.
  std::optional<Split> best_split_on(size_t feature, Draw begin, Draw end, double sum) const {
    std::vector<size_t> sorted(begin, end);
    // Ties broken by row, so the sums below run in the same order on every platform.
    std::sort(sorted.begin(), sorted.end(), [&](size_t a, size_t b) {
      const double x = rows_[a][feature], y = rows_[b][feature];
      return x != y ? x < y : a < b;
    });
    const size_t n = sorted.size();
    std::optional<Split> best;
    double left_sum = 0;
    for (size_t k = 1; k < n; ++k) {  // the left side is sorted[0, k)
      left_sum += targets_[sorted[k - 1]];
      const double below = rows_[sorted[k - 1]][feature], above = rows_[sorted[k]][feature];
      if (k < params_.min_leaf || n - k < params_.min_leaf || !(below < above)) continue;
      const double right_sum = sum - left_sum;
      const double score = left_sum * left_sum / static_cast<double>(k) +
                           right_sum * right_sum / static_cast<double>(n - k);
      if (best && !(score > best->score)) continue;
      double threshold = below + (above - below) / 2;
      // Neighbouring doubles have no midpoint, and the difference of far ones may overflow.
      if (!(threshold < above)) threshold = below;
      best = Split{feature, threshold, score};
    }
    return best;
  }

  const std::vector<std::vector<double>>& rows_;
  const std::vector<double>& targets_;
  const ForestParams& params_;
  Rng& rng_;
  std::vector<Node> nodes_;
};

Result<RegressionForest> RegressionForest::fit(const std::vector<std::vector<double>>& rows,
                                               const std::vector<double>& targets,
                                               const ForestParams& params, uint64_t seed) {
  if (rows.empty() || rows.size() != targets.size()) {
    return invalid_argument("regression forest: need as many targets as rows, at least one");
  }
  if (params.trees == 0 || params.min_leaf == 0 || params.features_per_split == 0) {
    return invalid_argument("regression forest: trees, min_leaf and features_per_split >= 1");
  }
  const size_t width = rows[0].size();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (width == 0 || rows[i].size() != width) {
      return invalid_argument("regression forest: rows must share a width of at least 1");
    }
    const auto finite = [](double x) { return std::isfinite(x); };
    if (!std::isfinite(targets[i]) || !std::all_of(rows[i].begin(), rows[i].end(), finite)) {
      return invalid_argument("regression forest: rows and targets must be finite");
    }
  }
  Rng rng(seed);
  TreeGrower grower(rows, targets, params, rng);
  std::vector<std::vector<Node>> trees;
  trees.reserve(params.trees);
  for (size_t t = 0; t < params.trees; ++t) {
    std::vector<size_t> draws(rows.size());
    for (size_t& row : draws) row = rng.below(rows.size());
    trees.push_back(grower.grow(std::move(draws)));
  }
  return RegressionForest(std::move(trees));
}

double RegressionForest::predict(const std::vector<double>& x) const {
  double sum = 0;
  for (const std::vector<Node>& tree : trees_) {
    size_t at = 0;
    while (tree[at].left != 0) {
      at = x[tree[at].feature] <= tree[at].threshold ? tree[at].left : tree[at].right;
    }
    sum += tree[at].value;
  }
  return sum / static_cast<double>(trees_.size());
}

}  // namespace fedcase::scheduling
