#pragma once
// One fixed local-data scenario (records, seed, importance sampling and cache, per-sample
// losses) and the read plan the C++ LocalData makes for it, round by round: what the C
// interface's test and the Python package's test (through read_plan_dump) compare with.

#include <cstdint>
#include <string>
#include <vector>

namespace fedcase::testing {

constexpr uint64_t kPlanSeed = 7;
constexpr uint64_t kPlanBudget = 96;         // samples per round, repeats included
constexpr uint64_t kPlanCacheBytes = 2'000;  // about a sixth of the records
constexpr double kPlanRepetition = 2;
constexpr size_t kPlanBatch = 8;
constexpr size_t kPlanRounds = 4;

// 80 records, record i of 100 + i % 50 bytes.
std::vector<std::string> plan_records();
// The loss the scenario's trainers report for sample `id`: the same in every language.
float plan_loss(size_t id);

struct PlanRound {
  std::vector<size_t> ids;  // the ids in the order the trainer read them
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
};
// `rounds` rounds of importance sampling with the importance cache (kPlanBudget samples,
// kPlanCacheBytes, kPlanRepetition, batches of kPlanBatch) through a C++ trainer.
std::vector<PlanRound> cpp_read_plan(size_t rounds);

}  // namespace fedcase::testing
