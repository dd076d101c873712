#include "aggregation/server_optimizer.h"

#include <cmath>

namespace fedcase::aggregation {
namespace {

// Plain FedAvg: global += lr * mean_delta. Stateless.
class FedAvgOptimizer : public ServerOptimizer {
 public:
  explicit FedAvgOptimizer(double lr) : lr_(lr) {}
  std::string name() const override { return "fedavg"; }
  Status step(std::vector<float>& global, const std::vector<float>& mean_delta) override {
    if (global.size() != mean_delta.size()) return invalid_argument("delta size mismatch");
    const float lr = static_cast<float>(lr_);
    for (size_t i = 0; i < global.size(); ++i) global[i] += lr * mean_delta[i];
    return ok_status();
  }
  std::string save_state() const override { return {}; }
  Status load_state(std::string_view state) override {
    return state.empty() ? ok_status() : invalid_argument("fedavg has no state");
  }

 private:
  double lr_;
};

}  // namespace

Result<std::unique_ptr<ServerOptimizer>> make_server_optimizer(const nlohmann::json& config) {
  if (!config.is_object()) return invalid_argument("server_optimizer must be an object");
  std::string name = config.value("name", std::string("fedavg"));
  double lr = 1.0;
  if (config.contains("lr")) {
    if (!config["lr"].is_number()) return invalid_argument("server_optimizer.lr must be a number");
    lr = config["lr"].get<double>();
  }
  if (!(lr > 0) || !std::isfinite(lr)) return invalid_argument("server_optimizer.lr must be > 0");
  if (name == "fedavg") return std::unique_ptr<ServerOptimizer>(new FedAvgOptimizer(lr));
  return invalid_argument("unknown server optimizer '" + name + "'");
}

}  // namespace fedcase::aggregation
