#pragma once
// Server optimizers turn a round's aggregated client delta into the next global model.
// An optimizer's state (momentum, second moments, ...) is saved with every committed model so
// a restarted coordinator continues exactly where it stopped.
//
// The adaptive optimizers follow Reddi et al., "Adaptive Federated Optimization" (ICLR 2021),
// Algorithm 2, with Delta_t the weighted mean client delta:
//   m_t = beta1 * m_{t-1} + (1 - beta1) * Delta_t                    (m_{-1} = 0)
//   FedAdagrad: v_t = v_{t-1} + Delta_t^2
//   FedAdam:    v_t = beta2 * v_{t-1} + (1 - beta2) * Delta_t^2
//   FedYogi:    v_t = v_{t-1} - (1 - beta2) * Delta_t^2 * sign(v_{t-1} - Delta_t^2)
//   x_{t+1} = x_t + lr * m_t / (sqrt(v_t) + tau)                     (v_{-1} = tau^2)
// FedAvgM (Hsu et al. 2019): m_t = momentum * m_{t-1} + Delta_t; x_{t+1} = x_t + lr * m_t.
// FedAvg: x_{t+1} = x_t + lr * Delta_t.
// State vectors are float32; each element is computed in double and rounded once when stored,
// so a run restored from save_state() takes bit-identical steps.
//
// Thread safety: not thread-safe; one round at a time calls step().

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
  // (local model - global model). Sizes must match each other and any state from earlier
  // steps (kInvalidArgument otherwise, with the model unchanged).
  virtual Status step(std::vector<float>& global, const std::vector<float>& mean_delta) = 0;
  // Opaque state bytes (state_codec.h envelope: versioned, checksummed, size-checked);
  // load_state(save_state()) restores an identical optimizer. load_state("") resets to the
  // fresh state; state saved by another optimizer kind or corrupted is rejected
  // (kInvalidArgument) and leaves the optimizer unchanged.
  virtual std::string save_state() const = 0;
  virtual Status load_state(std::string_view state) = 0;
};

// Builds the optimizer a job's config names. Keys (each optimizer accepts only its own; an
// unknown or inapplicable key is kInvalidArgument, as is a value out of range):
//   name      "fedavg" (default) | "fedavgm" | "fedadam" | "fedyogi" | "fedadagrad"
//   lr        server learning rate > 0; default 1.0 for fedavg and fedavgm, 0.01 otherwise
//   momentum  fedavgm, in [0, 1), default 0.9
//   beta1     fedadam, fedyogi, fedadagrad, in [0, 1), default 0.9
//   beta2     fedadam, fedyogi, in [0, 1), default 0.99
//   tau       fedadam, fedyogi, fedadagrad: degree of adaptivity > 0, default 1e-3
Result<std::unique_ptr<ServerOptimizer>> make_server_optimizer(const nlohmann::json& config);

}  // namespace fedcase::aggregation
