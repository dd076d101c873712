#include "client_sdk/local_trainer.h"

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

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kStoreFile = "samples.bin";
constexpr const char* kStateFile = "state.bin";

Status read_count(const json& object, const char* key, const std::string& where, uint64_t& out) {
  auto it = object.find(key);
  if (it == object.end()) return ok_status();
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return invalid_argument(where + " must be an integer >= 0");
  }
  out = it->get<uint64_t>();
  return ok_status();
}

std::string path_in(const std::string& dir, const char* file) {
  return (std::filesystem::path(dir) / file).string();
}

}  // namespace

Result<DataDirectives> parse_data_directives(const json& task) {
  if (!task.is_object()) return invalid_argument("task must be a JSON object");
  DataDirectives d;
  if (auto it = task.find("sampling"); it != task.end()) {
    auto sampling = it->is_string() ? parse_sampling(it->get<std::string>())
                                    : Result<Sampling>(invalid_argument("not a string"));
    if (!sampling.ok()) return invalid_argument("task sampling: " + sampling.status().message());
    d.sampling = *sampling;
  }
  FEDCASE_RETURN_IF_ERROR(read_count(task, "sample_budget", "task sample_budget", d.sample_budget));
  if (auto it = task.find("train"); it != task.end() && it->is_object()) {
    FEDCASE_RETURN_IF_ERROR(read_count(*it, "epochs", "task train.epochs", d.epochs));
  }
  if (auto it = task.find("cache"); it != task.end()) {
    const json& cache = *it;
    if (!cache.is_object()) return invalid_argument("task cache must be a JSON object");
    d.cache_policy = CachePolicy::kImportance;  // a cache directive without a policy
    if (auto p = cache.find("policy"); p != cache.end()) {
      if (!p->is_string()) return invalid_argument("task cache.policy must be a string");
      auto policy = parse_cache_policy(p->get<std::string>());
      if (!policy.ok()) return invalid_argument("task cache.policy: " + policy.status().message());
      d.cache_policy = *policy;
    }
    FEDCASE_RETURN_IF_ERROR(
        read_count(cache, "budget_bytes", "task cache.budget_bytes", d.cache_budget_bytes));
    if (auto r = cache.find("repetition_factor"); r != cache.end()) {
      if (!r->is_number() || !std::isfinite(r->get<double>()) || r->get<double>() < 1) {
        return invalid_argument("task cache.repetition_factor must be a number >= 1");
      }
      d.repetition_factor = r->get<double>();
    }
  }
  return d;
}

LocalTrainer::LocalTrainer(LocalDataConfig config, ImportanceSampler sampler,
                           std::unique_ptr<SampleStore> store)
    : config_(std::move(config)), sampler_(std::move(sampler)), store_(std::move(store)) {
  fingerprint_ = partition_fingerprint(*config_.data, config_.indices);
  batch_.rows = config_.data->rows;
  batch_.cols = config_.data->cols;
}

Result<std::unique_ptr<LocalTrainer>> LocalTrainer::open(LocalDataConfig config) {
  if (!config.data) return invalid_argument("local training needs a dataset");
  if (config.indices.empty()) return invalid_argument("the local partition is empty");
  for (size_t i : config.indices) {
    if (i >= config.data->size()) {
      return invalid_argument("partition index " + std::to_string(i) + " is outside a dataset of " +
                              std::to_string(config.data->size()));
    }
  }
  FEDCASE_RETURN_IF_ERROR(validate(config.storage));
  const size_t n = config.indices.size();
  if (config.state_dir.empty()) {
    ImportanceSampler sampler(n, config.sampler);
    return std::unique_ptr<LocalTrainer>(
        new LocalTrainer(std::move(config), std::move(sampler), nullptr));
  }

  std::error_code ec;
  std::filesystem::create_directories(config.state_dir, ec);
  if (ec) return internal_error("cannot create " + config.state_dir + ": " + ec.message());
  const uint64_t fingerprint = partition_fingerprint(*config.data, config.indices);

  // The sample store: reuse one written from this partition with this record size.
  const std::string store_path = path_in(config.state_dir, kStoreFile);
  const uint64_t record_bytes =
      config.storage.sample_bytes ? config.storage.sample_bytes : config.data->image_bytes();
  auto store = SampleStore::open(store_path, config.storage);
  if (!store.ok() || (*store)->fingerprint() != fingerprint ||
      (*store)->record_bytes() != record_bytes || (*store)->size() != n) {
    FEDCASE_RETURN_IF_ERROR(
        write_sample_store(store_path, *config.data, config.indices, record_bytes));
    store = SampleStore::open(store_path, config.storage);
    if (!store.ok()) return store.status();
  }

  // The sampler: continue from a saved state of this partition, else start afresh.
  std::optional<ImportanceSampler> sampler;
  const std::string state_path = path_in(config.state_dir, kStateFile);
  auto state = load_client_state(state_path);
  if (state.ok() && state->partition_fingerprint == fingerprint) {
    auto restored = ImportanceSampler::restore(n, config.sampler, std::move(state->sampler));
    if (restored.ok()) {
      sampler.emplace(std::move(restored).value());
    } else {
      log_warn("starting a new client state: " + restored.status().message());
    }
  } else if (state.ok()) {
    log_warn("starting a new client state: " + state_path + " describes another partition");
  } else if (state.status().code() != Code::kNotFound) {
    log_warn("starting a new client state: " + state.status().message());
  }
  if (!sampler) sampler.emplace(n, config.sampler);
  return std::unique_ptr<LocalTrainer>(
      new LocalTrainer(std::move(config), std::move(*sampler), std::move(store).value()));
}

void LocalTrainer::prepare_cache(const DataDirectives& d) {
  uint64_t budget = d.cache_budget_bytes;
  if (config_.cache_capacity_bytes > 0) budget = std::min(budget, config_.cache_capacity_bytes);
  if (cache_ && cache_->policy() == d.cache_policy && cache_->budget_bytes() == budget) return;
  cache_ = make_cache(d.cache_policy, budget, size());
  for (size_t id = 0; id < size(); ++id) cache_->set_importance(id, sampler_.weight(id));
}

Status LocalTrainer::stage(const std::vector<size_t>& order, size_t first, size_t count) {
  const size_t image = batch_.image_bytes();
  for (size_t k = 0; k < count; ++k) {
    const size_t id = order[first + k];
    uint8_t* dst = batch_.pixels.data() + k * image;
    if (!store_) {
      const size_t i = config_.indices[id];
      std::memcpy(dst, config_.data->pixels.data() + i * image, image);
      batch_.labels[k] = config_.data->labels[i];
      continue;
    }
    if (const std::string* cached = cache_->lookup(id)) {
      std::memcpy(dst, cached->data(), image);
    } else {
      FEDCASE_RETURN_IF_ERROR(store_->read(id, record_));
      std::memcpy(dst, record_.data(), image);
      cache_->offer(id, std::move(record_));
    }
    batch_.labels[k] = store_->label(id);
  }
  return ok_status();
}

Result<RoundStats> LocalTrainer::train_round(ml::Model& model, const ml::TrainOptions& options,
                                             const DataDirectives& d) {
  if (!std::isfinite(d.repetition_factor) || d.repetition_factor < 1) {
    return invalid_argument("the repetition factor must be >= 1");
  }
  const uint64_t budget = d.sample_budget ? d.sample_budget : d.epochs * size();
  if (budget == 0) return invalid_argument("the round has no samples to train on");
  if (store_) prepare_cache(d);
  const CacheStats cache_before = cache_ ? cache_->stats() : CacheStats();
  const ReadStats reads_before = store_ ? store_->stats() : ReadStats();

  const std::vector<size_t> order =
      plan_round_order(sampler_, d.sampling, budget, cache_.get(), d.repetition_factor);
  const size_t batch = std::max<size_t>(1, options.batch_size);
  batch_.pixels.resize(batch * batch_.image_bytes());
  batch_.labels.resize(batch);
  // The trainer sees buffer positions: each batch indexes the buffer from 0.
  std::vector<size_t> positions(order.size());
  for (size_t i = 0; i < order.size(); ++i) positions[i] = i % batch;

  FEDCASE_RETURN_IF_ERROR(stage(order, 0, std::min(batch, order.size())));
  size_t next = batch;   // first sample of the next batch
  double staging_s = 0;  // reads done while the trainer's clock runs
  Status read_status;
  std::vector<size_t> ids;
  auto observer = [&](const std::vector<size_t>& batch_positions,
                      const std::vector<float>& losses) {
    const size_t first = next - batch;
    ids.clear();
    for (size_t p : batch_positions) ids.push_back(order[first + p]);
    sampler_.observe_batch(ids, losses);
    if (cache_) {
      for (size_t id : ids) cache_->set_importance(id, sampler_.weight(id));
    }
    if (next < order.size() && read_status.ok()) {
      const auto start = Clock::now();
      read_status = stage(order, next, std::min(batch, order.size() - next));
      staging_s += std::chrono::duration<double>(Clock::now() - start).count();
    }
    next += batch;
  };
  const ml::TrainStats trained = model.train(batch_, positions, options, observer);
  FEDCASE_RETURN_IF_ERROR(read_status);
  sampler_.end_round(trained.samples ? trained.loss_sum / double(trained.samples)
                                     : std::numeric_limits<double>::quiet_NaN());
  if (store_) save_state();

  RoundStats out;
  out.samples = trained.samples;
  out.loss_sum = trained.loss_sum;
  out.loss_sq_sum = trained.loss_sq_sum;
  out.compute_s = std::max(0.0, trained.compute_seconds - staging_s);
  if (cache_) {
    out.cache_hits = cache_->stats().hits - cache_before.hits;
    out.cache_misses = cache_->stats().misses - cache_before.misses;
    out.reused = cache_->stats().reused - cache_before.reused;
  }
  if (store_) {
    out.bytes_read = store_->stats().bytes - reads_before.bytes;
    out.io_s = store_->stats().io_seconds - reads_before.io_seconds;
  }
  return out;
}

void LocalTrainer::save_state() const {
  Status s = save_client_state(path_in(config_.state_dir, kStateFile),
                               ClientState{fingerprint_, sampler_.state()});
  if (!s.ok()) log_warn("client state not saved: " + s.message());
}

}  // namespace fedcase::client
