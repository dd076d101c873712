#pragma once
// Server optimizers turn a round's aggregated client delta into the next global model.
// An optimizer's state (momentum, second moments, ...) is saved with every committed model so
// a restarted coordinator continues exactly where it stopped.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace fedcase::aggregation {

class ServerOptimizer {
 public:
  virtual ~ServerOptimizer() = default;
  virtual std::string name() const = 0;
  // global <- next global model, given the weighted mean of the clients' deltas
  // (local model - global model). Sizes must match (kInvalidArgument otherwise).
  virtual Status step(std::vector<float>& global, const std::vector<float>& mean_delta) = 0;
  // Opaque state bytes; load_state(save_state()) restores an identical optimizer.
  virtual std::string save_state() const = 0;
  virtual Status load_state(std::string_view state) = 0;
};

// Builds the optimizer a job's config names: {"name": "fedavg", "lr": 1.0}.
// kInvalidArgument for an unknown name or a bad parameter.
Result<std::unique_ptr<ServerOptimizer>> make_server_optimizer(const nlohmann::json& config);

}  // namespace fedcase::aggregation
