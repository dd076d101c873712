// Prints the C++ LocalData's read plan of tests/client_sdk/read_plan.h as one JSON object, for
// the Python package's test to compare with its own:
//   {"seed":7,"budget":96,...,"rounds":[{"ids":[...],"cache_hits":3,"cache_misses":93},...]}

#include <iostream>
#include <nlohmann/json.hpp>

#include "tests/client_sdk/read_plan.h"

int main() {
  using namespace fedcase::testing;
  nlohmann::json out = {{"seed", kPlanSeed},
                        {"budget", kPlanBudget},
                        {"cache_bytes", kPlanCacheBytes},
                        {"repetition_factor", kPlanRepetition},
                        {"batch_size", kPlanBatch},
                        {"rounds", nlohmann::json::array()}};
  for (const PlanRound& round : cpp_read_plan(kPlanRounds)) {
    out["rounds"].push_back({{"ids", round.ids},
                             {"cache_hits", round.cache_hits},
                             {"cache_misses", round.cache_misses}});
  }
  std::cout << out.dump() << std::endl;
  return 0;
}
