#include "sim/config.h"

#include <filesystem>

#include "aggregation/server_optimizer.h"
#include "common/json_read.h"
#include "scheduling/selection.h"

namespace fedcase::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

Result<SimConfig> parse_sim_config(const nlohmann::json& config) {
  SimConfig c;
  ObjectReader r(config, "sim");
  r.integer("seed", c.seed)
      .text("data_dir", c.data_dir)
      .text("bandwidth_trace", c.bandwidth_trace)
      .text("fleet_csv", c.fleet_csv)
      .text("model", c.model)
      .integer("clients_per_round", c.clients_per_round)
      .integer("min_clients", c.min_clients)
      .integer("min_updates", c.min_updates)
      .integer("frequency_order_period", c.frequency_order_period)
      .number("target_accuracy", c.target_accuracy, 0, 1)
      .integer("max_rounds", c.max_rounds)
      .number("max_virtual_s", c.max_virtual_s, 0, kInf)
      .integer("eval_samples", c.eval_samples)
      .number("heartbeat_s", c.heartbeat_s, 1e-3, 89)
      .number("idle_wait_s", c.idle_wait_s, 1e-3, kInf)
      .number("duration_sigma", c.duration_sigma, 0, 10);
  if (const nlohmann::json* stop = r.member("stop_at_target")) {
    if (!stop->is_boolean()) return invalid_argument("sim.stop_at_target must be a boolean");
    c.stop_at_target = stop->get<bool>();
  }
  if (const nlohmann::json* fleet = r.member("fleet")) {
    auto parsed = parse_fleet_params(*fleet);
    if (!parsed.ok()) return parsed.status();
    c.fleet = *parsed;
  }
  if (const nlohmann::json* selection = r.member("selection")) {
    // Validated here so a bad policy fails at load, not at the first round.
    auto policy = scheduling::make_selection_policy(*selection, c.seed);
    if (!policy.ok()) return policy.status();
    auto overcommit = scheduling::selection_overcommit(*selection);
    if (!overcommit.ok()) return overcommit.status();
    c.selection = *selection;
    c.overcommit = *overcommit;
  }
  if (const nlohmann::json* training = r.member("training")) {
    auto parsed = scheduling::parse_training_params(*training);
    if (!parsed.ok()) return parsed.status();
    c.training = *parsed;
  }
  if (const nlohmann::json* aggregation = r.member("aggregation")) {
    auto parsed = aggregation::parse_aggregator_config(*aggregation);
    if (!parsed.ok()) return parsed.status();
    c.aggregation = *parsed;
  }
  if (const nlohmann::json* optimizer = r.member("server_optimizer")) {
    auto parsed = aggregation::make_server_optimizer(*optimizer);
    if (!parsed.ok()) return parsed.status();
    c.server_optimizer = *optimizer;
  }
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  if (c.clients_per_round == 0) return invalid_argument("sim.clients_per_round must be > 0");
  if (c.min_updates == 0 || c.min_updates > c.clients_per_round) {
    return invalid_argument("sim.min_updates must be in [1, clients_per_round]");
  }
  return c;
}

void resolve_paths(SimConfig& config, const std::string& root) {
  for (std::string* path : {&config.data_dir, &config.bandwidth_trace, &config.fleet_csv}) {
    if (!path->empty() && std::filesystem::path(*path).is_relative()) {
      *path = (std::filesystem::path(root) / *path).lexically_normal().string();
    }
  }
}

}  // namespace fedcase::sim
