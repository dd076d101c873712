#include "aggregation/aggregator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>

#include "aggregation/dp.h"
#include "aggregation/fedavg.h"
#include "aggregation/robust.h"
#include "aggregation/validation.h"
#include "aggregation/vector_ops.h"
#include "common/json_read.h"
#include "common/spool_file.h"

namespace fedcase::aggregation {
namespace {

enum class Rule { kFedAvg, kMedian, kTrimmedMean, kKrum, kMultiKrum };

struct RuleInfo {
  const char* name;
  Rule rule;
};

const RuleInfo kRules[] = {
    {"fedavg", Rule::kFedAvg},
    {"median", Rule::kMedian},
    {"trimmed_mean", Rule::kTrimmedMean},
    {"krum", Rule::kKrum},
    {"multi_krum", Rule::kMultiKrum},
};

constexpr uint64_t kMaxThreads = 64;
constexpr double kInf = std::numeric_limits<double>::infinity();

const RuleInfo* find_rule(const std::string& name) {
  for (const RuleInfo& info : kRules) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

Status unknown_rule(const std::string& name) {
  return invalid_argument(
      "aggregation.rule must be \"fedavg\", \"median\", \"trimmed_mean\", \"krum\" or "
      "\"multi_krum\", not \"" +
      name + "\"");
}

Result<const RuleInfo*> validate(const AggregatorConfig& c) {
  const RuleInfo* info = find_rule(c.rule);
  if (info == nullptr) return unknown_rule(c.rule);
  if (!(c.clip_norm >= 0) || !std::isfinite(c.clip_norm)) {
    return invalid_argument("aggregation.clip_norm must be a number in [0, inf)");
  }
  if (c.threads < 1 || c.threads > kMaxThreads) {
    return invalid_argument("aggregation.threads must be an integer in [1, 64]");
  }
  if (c.max_buffered_updates < 1) {
    return invalid_argument("aggregation.max_buffered_updates must be at least 1");
  }
  if (c.byzantine_f >= c.max_buffered_updates || c.multi_krum_m > c.max_buffered_updates) {
    return invalid_argument(
        "aggregation.byzantine_f and multi_krum_m must be below max_buffered_updates");
  }
  if (!(c.trim_beta >= 0 && c.trim_beta < 0.5)) {
    return invalid_argument("aggregation.trim_beta must be a number in [0, 0.5)");
  }
  if (!(c.dp_noise_multiplier >= 0) || !std::isfinite(c.dp_noise_multiplier)) {
    return invalid_argument("aggregation.dp_noise_multiplier must be a number in [0, inf)");
  }
  if (c.dp_noise_multiplier > 0 && info->rule != Rule::kFedAvg) {
    return invalid_argument("aggregation.dp_noise_multiplier needs rule fedavg");
  }
  if (c.dp_noise_multiplier > 0 && c.clip_norm <= 0) {
    return invalid_argument("aggregation.dp_noise_multiplier needs clip_norm > 0");
  }
  return info;
}

Status check_partial_count(size_t held, size_t expected) {
  if (held == expected) return ok_status();
  return invalid_argument("the partial holds " + std::to_string(held) + " updates, not " +
                          std::to_string(expected));
}

Status check_discount(double discount) {
  if (discount > 0 && discount <= 1) return ok_status();
  return invalid_argument("an update's discount must be in (0, 1]");
}

uint64_t os_random_seed() {
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

// Streaming FedAvg with optional clipping and central DP.
class FedAvgAggregator : public Aggregator {
 public:
  FedAvgAggregator(const AggregatorConfig& config, UpdateShape shape)
      : pool_(std::make_shared<WorkerPool>(config.threads)),
        fedavg_(shape.values, pool_),
        parameters_(shape.parameters),
        clip_norm_(config.clip_norm),
        noise_multiplier_(config.dp_noise_multiplier),
        seed_(config.dp_seed ? *config.dp_seed : os_random_seed()) {}

  std::string name() const override { return "fedavg"; }
  size_t parameter_count() const override { return fedavg_.parameter_count(); }
  size_t updates() const override { return fedavg_.updates(); }

  using Aggregator::add;
  Status add(const UpdateValues& values, size_t count, double weight, double discount) override {
    FEDCASE_RETURN_IF_ERROR(damaged_);
    FEDCASE_RETURN_IF_ERROR(check_update_arguments(count, parameter_count(), weight));
    FEDCASE_RETURN_IF_ERROR(check_discount(discount));
    auto factor = clip_factor(values, parameters_, clip_norm_, *pool_);
    if (!factor.ok()) return factor.status();
    FEDCASE_RETURN_IF_ERROR(values.read_status());
    // With DP every client counts once: a reported weight would scale the sensitivity. A
    // discount (<= 1) only shrinks a clipped update, so the sensitivity stays clip_norm.
    FEDCASE_RETURN_IF_ERROR(fedavg_.add_scaled(values, count, dp() ? 1.0 : weight,
                                               *factor * discount, parameters_, discount));
    if (Status read = values.read_status(); !read.ok()) {
      damaged_ = internal_error("an update's fold was cut short by a failed read, so the "
                                "aggregate holds part of it: " + read.message());
    }
    return damaged_;
  }

  Status add_sum(const UnalignedFloat* sum, size_t count, double total_weight,
                 size_t updates) override {
    FEDCASE_RETURN_IF_ERROR(damaged_);
    if (dp() && total_weight != double(updates)) {
      return invalid_argument("with DP every update of a sum must weigh 1");
    }
    return fedavg_.add_sum(sum, count, total_weight, updates);
  }

  Result<EncodedPartial> partial() const override {
    FEDCASE_RETURN_IF_ERROR(damaged_);
    auto sum = fedavg_.partial_sum();
    if (!sum.ok()) return sum.status();
    return EncodedPartial{encode_partial_sum(*sum), sum->weight, sum->updates};
  }

  Status merge_partial(std::string_view bytes, size_t updates) override {
    FEDCASE_RETURN_IF_ERROR(damaged_);
    auto sum = decode_partial_sum(bytes, parameter_count());
    if (!sum.ok()) return sum.status();
    FEDCASE_RETURN_IF_ERROR(check_partial_count(sum->updates, updates));
    return add_sum(sum->sum.data(), sum->sum.size(), sum->weight, sum->updates);
  }

  Result<std::vector<float>> result() const override {
    FEDCASE_RETURN_IF_ERROR(damaged_);
    auto mean = fedavg_.mean();
    if (!mean.ok() || !dp()) return mean;
    // Noise of std z * C on the sum of clipped updates is z * C / n on their mean.
    const double stddev = noise_multiplier_ * clip_norm_ / static_cast<double>(updates());
    add_gaussian_noise(mean->data(), parameters_, stddev, seed_, *pool_);
    return mean;
  }

 private:
  bool dp() const { return noise_multiplier_ > 0; }

  std::shared_ptr<WorkerPool> pool_;
  StreamingFedAvg fedavg_;
  size_t parameters_;  // the leading values that are parameters
  double clip_norm_;
  double noise_multiplier_;
  uint64_t seed_;
  // Not OK once an update read a piece at a time failed part way through its fold: the sum
  // holds part of it, so nothing more is taken and nothing is given out.
  Status damaged_;
};

// Keeps a (clipped) copy of every update, up to a bound, and applies a robust rule at the end.
class BufferedAggregator : public Aggregator {
 public:
  BufferedAggregator(const AggregatorConfig& config, Rule rule, UpdateShape shape)
      : config_(config),
        rule_(rule),
        parameter_count_(shape.values),
        parameters_(shape.parameters),
        pool_(config.threads) {}

  std::string name() const override { return config_.rule; }
  size_t parameter_count() const override { return parameter_count_; }
  size_t updates() const override { return buffers_.size(); }

  using Aggregator::add;
  Status add(const UpdateValues& values, size_t count, double weight, double discount) override {
    FEDCASE_RETURN_IF_ERROR(check_update_arguments(count, parameter_count_, weight));
    FEDCASE_RETURN_IF_ERROR(check_discount(discount));
    if (discount != 1.0) {
      return invalid_argument(config_.rule + " aggregation takes no discounted updates");
    }
    FEDCASE_RETURN_IF_ERROR(check_room(1));
    auto factor = clip_factor(values, parameters_, config_.clip_norm, pool_);
    if (!factor.ok()) return factor.status();
    FEDCASE_RETURN_IF_ERROR(values.read_status());
    auto copy = allocate_update();
    if (!copy.ok()) return copy.status();
    const float a = static_cast<float>(*factor);
    float* out = copy->values;
    pool_.for_ranges(count, kMinParallelRange, [&](size_t, size_t begin, size_t end) {
      for_each_piece(values, begin, end, [&](size_t from, size_t to, const UnalignedFloat* x) {
        const size_t middle = std::clamp(parameters_, from, to);
        scale_copy(out + from, x, a, middle - from);
        scale_copy(out + middle, x + (middle - from), 1.0f, to - middle);
      });
    });
    FEDCASE_RETURN_IF_ERROR(values.read_status());  // the copy is dropped: nothing changed
    buffers_.push_back(std::move(copy).value());
    return ok_status();
  }

  Result<EncodedPartial> partial() const override {
    if (buffers_.empty()) return conflict("no update was added");
    // Robust rules ignore weights: each update weighs 1.
    return EncodedPartial{encode_partial_updates(buffered_values(), parameter_count_),
                          double(buffers_.size()), buffers_.size()};
  }

  // The updates were clipped by the aggregate that wrote the partial, under the same config.
  Status merge_partial(std::string_view bytes, size_t updates) override {
    auto values = decode_partial_updates(bytes, parameter_count_);
    if (!values.ok()) return values.status();
    const size_t held = values->size() / parameter_count_;
    FEDCASE_RETURN_IF_ERROR(check_partial_count(held, updates));
    FEDCASE_RETURN_IF_ERROR(check_room(held));
    std::vector<Buffered> copies;
    for (size_t i = 0; i < held; ++i) {
      auto copy = allocate_update();
      if (!copy.ok()) return copy.status();
      std::copy_n(values->data() + i * parameter_count_, parameter_count_, copy->values);
      copies.push_back(std::move(copy).value());
    }
    for (auto& copy : copies) buffers_.push_back(std::move(copy));
    return ok_status();
  }

  Result<std::vector<float>> result() const override {
    UpdateBatch batch;
    batch.parameter_count = parameter_count_;
    batch.compared_count = parameters_;
    batch.updates = buffered_values();
    switch (rule_) {
      case Rule::kMedian:
        return coordinate_median(batch, pool_);
      case Rule::kTrimmedMean:
        return trimmed_mean(batch, config_.trim_beta, pool_);
      case Rule::kKrum:
        return multi_krum(batch, config_.byzantine_f, 1, pool_);
      case Rule::kMultiKrum: {
        const size_t n = buffers_.size();
        const size_t f = config_.byzantine_f;
        const size_t m = config_.multi_krum_m > 0 ? config_.multi_krum_m : (n > f ? n - f : 0);
        return multi_krum(batch, f, m, pool_);
      }
      case Rule::kFedAvg:
        break;
    }
    return internal_error("rule " + config_.rule + " is not a buffered rule");
  }

 private:
  Status check_room(size_t more) const {
    if (buffers_.size() + more <= config_.max_buffered_updates) return ok_status();
    return resource_exhausted(config_.rule + " aggregation already holds " +
                              std::to_string(buffers_.size()) + " updates, its maximum is " +
                              std::to_string(config_.max_buffered_updates) +
                              " (max_buffered_updates)");
  }

  // One update's copy, in a file rather than on the heap: the kernel writes it out and drops
  // it from memory when memory is short, and reads it back when the rule runs.
  struct Buffered {
    std::unique_ptr<SpoolFile> file;
    float* values = nullptr;
  };

  Result<Buffered> allocate_update() const {
    auto file = SpoolFile::create(config_.buffer_dir);
    if (!file.ok()) {
      return resource_exhausted("no room to buffer another update: " + file.status().message());
    }
    auto mapped = (*file)->map_writable(parameter_count_ * sizeof(float));
    if (!mapped.ok()) {
      return resource_exhausted("no room to buffer another update: " + mapped.status().message());
    }
    return Buffered{std::move(file).value(), reinterpret_cast<float*>(*mapped)};
  }

  std::vector<const float*> buffered_values() const {
    std::vector<const float*> out;
    for (const Buffered& b : buffers_) out.push_back(b.values);
    return out;
  }

  AggregatorConfig config_;
  Rule rule_;
  size_t parameter_count_;  // every value of an update
  size_t parameters_;       // its leading values that are parameters
  mutable WorkerPool pool_;  // result() is logically const; the pool is scratch machinery
  std::vector<Buffered> buffers_;
};

}  // namespace

Result<AggregatorConfig> parse_aggregator_config(const nlohmann::json& config) {
  ObjectReader r(config, "aggregation");
  AggregatorConfig c;
  r.text("rule", c.rule);
  FEDCASE_RETURN_IF_ERROR(r.status());
  const RuleInfo* info = find_rule(c.rule);
  if (info == nullptr) return unknown_rule(c.rule);
  // Only this rule's keys are read, so strict_status() refuses the keys of other rules. The
  // reads check types and closed bounds; validate() checks open bounds and relations.
  r.number("clip_norm", c.clip_norm, 0, kInf).integer("threads", c.threads);
  const Rule rule = info->rule;
  if (rule != Rule::kFedAvg) r.integer("max_buffered_updates", c.max_buffered_updates);
  if (rule == Rule::kTrimmedMean) r.number("trim_beta", c.trim_beta, 0, 0.5);
  if (rule == Rule::kKrum || rule == Rule::kMultiKrum) r.integer("byzantine_f", c.byzantine_f);
  if (rule == Rule::kMultiKrum) r.integer("multi_krum_m", c.multi_krum_m);
  if (rule == Rule::kFedAvg) {
    r.number("dp_noise_multiplier", c.dp_noise_multiplier, 0, kInf);
    if (config.contains("dp_seed")) {
      uint64_t seed = 0;
      r.integer("dp_seed", seed);
      c.dp_seed = seed;
    }
  }
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  auto valid = validate(c);
  if (!valid.ok()) return valid.status();
  return c;
}

Result<std::unique_ptr<Aggregator>> make_aggregator(const AggregatorConfig& config,
                                                    UpdateShape shape) {
  auto info = validate(config);
  if (!info.ok()) return info.status();
  if (shape.parameters > shape.values) {
    return invalid_argument("an update of " + std::to_string(shape.values) +
                            " values cannot hold " + std::to_string(shape.parameters) +
                            " parameters");
  }
  if ((*info)->rule == Rule::kFedAvg) {
    return std::unique_ptr<Aggregator>(new FedAvgAggregator(config, shape));
  }
  return std::unique_ptr<Aggregator>(new BufferedAggregator(config, (*info)->rule, shape));
}

Result<std::unique_ptr<Aggregator>> make_aggregator(const nlohmann::json& config,
                                                    UpdateShape shape) {
  auto parsed = parse_aggregator_config(config);
  if (!parsed.ok()) return parsed.status();
  return make_aggregator(*parsed, shape);
}

}  // namespace fedcase::aggregation
