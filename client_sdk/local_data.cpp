#include "client_sdk/local_data.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>

#include "client_sdk/client_state.h"
#include "common/log.h"

namespace fedcase::client {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kStateFile = "state.bin";
// The most samples one round may train on (repeats included): a bound on the plan's memory.
constexpr uint64_t kMaxRoundSamples = 100'000'000;

std::string path_in(const std::string& dir, const char* file) {
  return (std::filesystem::path(dir) / file).string();
}

}  // namespace

DataDirectives data_directives(const protocol::TaskOffer& task) {
  DataDirectives d;
  d.sampling = task.sampling;
  d.sample_budget = task.sample_budget;
  d.epochs = task.train.epochs;
  d.cache_policy = task.cache.policy;
  d.cache_budget_bytes = task.cache.budget_bytes;
  d.repetition_factor = task.cache.repetition_factor;
  d.repetition = task.cache.repetition;
  return d;
}

namespace {

// The round's samples as a trainer sees them: reads go through the cache (when there is one)
// to the source, and reported losses go to the sampler (when there is one) and the cache.
class Samples final : public RoundSamples {
 public:
  Samples(const std::vector<size_t>& order, SampleSource& source, SampleCache* cache,
          ImportanceSampler* sampler)
      : order_(order), source_(source), cache_(cache), sampler_(sampler) {}

  size_t size() const override { return order_.size(); }
  size_t id(size_t position) const override { return order_.at(position); }

  Result<std::string_view> read(size_t position) override {
    if (position >= order_.size()) {
      return invalid_argument("position " + std::to_string(position) + " is outside the round");
    }
    const auto start = Clock::now();
    const size_t id = order_[position];
    if (cache_) {
      if (const std::string* cached = cache_->lookup(id)) {
        read_s += seconds_since(start);
        return std::string_view(*cached);
      }
    }
    Status s = source_.read(id, record_);
    const double took = seconds_since(start);
    read_s += took;
    miss_s += took;
    if (!s.ok()) return s;
    bytes_read += record_.size();
    if (cache_) cache_->offer(id, record_);
    return std::string_view(record_);
  }

  void report_losses(size_t first, const std::vector<float>& losses) override {
    if (!sampler_ || !bad_report.ok()) return;
    if (first > order_.size() || losses.size() > order_.size() - first) {
      bad_report = internal_error("the trainer reported losses outside the round's positions");
      return;
    }
    for (float loss : losses) {
      if (!std::isfinite(loss) || loss < 0) {
        bad_report = internal_error("the trainer reported a loss that is not finite and >= 0");
        return;
      }
    }
    ids_.assign(order_.begin() + first, order_.begin() + first + losses.size());
    sampler_->observe_batch(ids_, losses);
    for (size_t k = 0; k < losses.size(); ++k) {
      loss_sum += losses[k];
      loss_sq_sum += double(losses[k]) * losses[k];
      if (cache_) cache_->set_importance(ids_[k], sampler_->weight(ids_[k]));
    }
    reported += losses.size();
  }

  double read_s = 0;  // inside read(), hits included
  double miss_s = 0;  // reading from the source
  uint64_t bytes_read = 0;
  uint64_t reported = 0;
  double loss_sum = 0, loss_sq_sum = 0;
  Status bad_report;  // the first report that broke the contract; later ones are ignored

 private:
  static double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
  const std::vector<size_t>& order_;
  SampleSource& source_;
  SampleCache* cache_;
  ImportanceSampler* sampler_;
  std::string record_;
  std::vector<size_t> ids_;
};

}  // namespace

LocalData::LocalData(LocalDataConfig config, uint64_t fingerprint, ImportanceSampler sampler)
    : config_(std::move(config)), fingerprint_(fingerprint), sampler_(std::move(sampler)) {
  uint64_t total = 0;
  for (size_t id = 0; id < config_.source->count(); ++id) {
    total += config_.source->sample_bytes(id);
  }
  mean_sample_bytes_ = total / config_.source->count();
}

Result<std::unique_ptr<LocalData>> LocalData::open(LocalDataConfig config) {
  if (!config.source) return invalid_argument("local training needs a sample source");
  const size_t n = config.source->count();
  if (n == 0) return invalid_argument("the sample source is empty");
  const uint64_t fingerprint = config.source->fingerprint();
  std::optional<ImportanceSampler> sampler;
  if (!config.state_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(config.state_dir, ec);
    if (ec) return internal_error("cannot create " + config.state_dir + ": " + ec.message());
    // The sampler: continue from a saved state of these samples, else start afresh.
    const std::string state_path = path_in(config.state_dir, kStateFile);
    auto state = load_client_state(state_path);
    if (state.ok() && state->source_fingerprint == fingerprint) {
      auto restored = ImportanceSampler::restore(n, config.sampler, std::move(state->sampler));
      if (restored.ok()) {
        sampler.emplace(std::move(restored).value());
      } else {
        log_warn("starting a new client state: " + restored.status().message());
      }
    } else if (state.ok()) {
      log_warn("starting a new client state: " + state_path + " describes other samples");
    } else if (state.status().code() != Code::kNotFound) {
      log_warn("starting a new client state: " + state.status().message());
    }
  }
  if (!sampler) sampler.emplace(n, config.sampler);
  return std::unique_ptr<LocalData>(
      new LocalData(std::move(config), fingerprint, std::move(*sampler)));
}

void LocalData::prepare_cache(const DataDirectives& d) {
  uint64_t budget = d.cache_budget_bytes;
  if (config_.cache_capacity_bytes > 0) budget = std::min(budget, config_.cache_capacity_bytes);
  if (cache_ && cache_->policy() == d.cache_policy && cache_->budget_bytes() == budget) return;
  cache_ = make_cache(d.cache_policy, budget, size());
  for (size_t id = 0; id < size(); ++id) cache_->set_importance(id, sampler_.weight(id));
}

Result<LocalData::Trained> LocalData::train_round(Trainer& trainer,
                                                  const std::vector<float>& parameters,
                                                  const TrainSettings& settings,
                                                  const DataDirectives& d) {
  if (!std::isfinite(d.repetition_factor) || d.repetition_factor < 1) {
    return invalid_argument("the repetition factor must be >= 1");
  }
  const uint64_t budget = d.sample_budget ? d.sample_budget : d.epochs * size();
  if (budget == 0) return invalid_argument("the round has no samples to train on");
  if (budget > kMaxRoundSamples || (!d.sample_budget && d.epochs > kMaxRoundSamples / size())) {
    return invalid_argument("the round asks for more than " + std::to_string(kMaxRoundSamples) +
                            " samples");
  }
  prepare_cache(d);
  const CacheStats cache_before = cache_->stats();
  const double device_before = config_.source->device_seconds();

  const std::vector<size_t> order =
      plan_round_order(sampler_, d.sampling, budget, cache_.get(),
                       {d.repetition, d.repetition_factor, uint32_t(settings.batch_size)});
  Samples samples(order, *config_.source, cache_.get(), &sampler_);
  const auto start = Clock::now();
  auto trained = trainer.train(parameters, samples, settings);
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (!trained.ok()) return trained.status();
  FEDCASE_RETURN_IF_ERROR(samples.bad_report);
  if (trained->size() != parameters.size()) {
    return internal_error("the trainer returned " + std::to_string(trained->size()) +
                          " parameters for a model of " + std::to_string(parameters.size()));
  }
  for (float v : *trained) {
    if (!std::isfinite(v)) return internal_error("the trainer returned a non-finite parameter");
  }
  sampler_.end_round(samples.reported ? samples.loss_sum / double(samples.reported)
                                      : std::numeric_limits<double>::quiet_NaN());
  if (!config_.state_dir.empty()) save_state();

  Trained out{std::move(trained).value(), {}};
  RoundStats& stats = out.stats;
  stats.samples = order.size();
  stats.loss_sum = samples.loss_sum;
  stats.loss_sq_sum = samples.loss_sq_sum;
  stats.compute_s = std::max(0.0, wall_s - samples.read_s);
  stats.cache_hits = cache_->stats().hits - cache_before.hits;
  stats.cache_misses = cache_->stats().misses - cache_before.misses;
  stats.reused = cache_->stats().reused - cache_before.reused;
  stats.bytes_read = samples.bytes_read;
  stats.io_s =
      device_before >= 0 ? config_.source->device_seconds() - device_before : samples.miss_s;
  return out;
}

void LocalData::save_state() const {
  Status s = save_client_state(path_in(config_.state_dir, kStateFile),
                               ClientState{fingerprint_, sampler_.state()});
  if (!s.ok()) log_warn("client state not saved: " + s.message());
}

Result<Evaluation> evaluate_held_out(Trainer& trainer, const std::vector<float>& parameters,
                                     SampleSource& source, uint64_t max_samples) {
  if (source.count() == 0) return invalid_argument("the held-out source is empty");
  const size_t n = max_samples ? std::min<uint64_t>(max_samples, source.count()) : source.count();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  Samples samples(order, source, nullptr, nullptr);
  return trainer.evaluate(parameters, samples);
}

}  // namespace fedcase::client
