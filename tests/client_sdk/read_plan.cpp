#include "tests/client_sdk/read_plan.h"

#include <algorithm>
#include <stdexcept>

#include "client_sdk/local_data.h"

namespace fedcase::testing {
namespace {

using namespace fedcase::client;

// Reads every position in batches and reports plan_loss of each sample.
class PlanTrainer final : public Trainer {
 public:
  std::vector<size_t> ids;
  Status prepare(const ModelInfo&) override { return ok_status(); }
  Result<std::vector<float>> train(const std::vector<float>& parameters, RoundSamples& samples,
                                   const TrainSettings& settings) override {
    for (size_t first = 0; first < samples.size(); first += settings.batch_size) {
      const size_t end = std::min(samples.size(), first + settings.batch_size);
      std::vector<float> losses;
      for (size_t p = first; p < end; ++p) {
        auto record = samples.read(p);
        if (!record.ok()) return record.status();
        ids.push_back(samples.id(p));
        losses.push_back(plan_loss(samples.id(p)));
      }
      samples.report_losses(first, losses);
    }
    return parameters;
  }
  Result<Evaluation> evaluate(const std::vector<float>&, RoundSamples&) override {
    return Evaluation{};
  }
};

}  // namespace

std::vector<std::string> plan_records() {
  std::vector<std::string> records;
  for (size_t i = 0; i < 80; ++i) records.emplace_back(100 + i % 50, char('a' + i % 26));
  return records;
}

float plan_loss(size_t id) { return 0.1f + float(id * 37 % 11) / 4.0f; }

std::vector<PlanRound> cpp_read_plan(size_t rounds) {
  MemorySource source(plan_records());
  LocalDataConfig config;
  config.source = &source;
  config.sampler.seed = kPlanSeed;
  auto local = LocalData::open(std::move(config));
  if (!local.ok()) throw std::runtime_error(local.status().to_string());
  DataDirectives d;
  d.sampling = Sampling::kImportance;
  d.sample_budget = kPlanBudget;
  d.cache_policy = CachePolicy::kImportance;
  d.cache_budget_bytes = kPlanCacheBytes;
  d.repetition_factor = kPlanRepetition;
  TrainSettings settings;
  settings.batch_size = kPlanBatch;
  std::vector<PlanRound> plan;
  for (size_t r = 0; r < rounds; ++r) {
    PlanTrainer trainer;
    auto trained = (*local)->train_round(trainer, {0.5f}, settings, d);
    if (!trained.ok()) throw std::runtime_error(trained.status().to_string());
    plan.push_back({trainer.ids, trained->stats.cache_hits, trained->stats.cache_misses});
  }
  return plan;
}

}  // namespace fedcase::testing
