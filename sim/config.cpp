#include "sim/config.h"

#include <filesystem>

#include "common/json_read.h"

namespace fedcase::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Result<SimPace> parse_pace(const nlohmann::json& json) {
  SimPace pace;
  ObjectReader r(json, "sim.pace");
  r.number("pool_factor", pace.rule.pool_factor, 1, 1e6)
      .number("min_period_s", pace.rule.min_period_s, 0, 86400)
      .number("max_period_s", pace.rule.max_period_s, 0, 86400)
      .number("jitter", pace.rule.jitter, 0, 1)
      .number("value_spread", pace.rule.value_spread, 0, 1)
      .number("awake_s", pace.awake_s, 1e-3, 3600);
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  FEDCASE_RETURN_IF_ERROR(scheduling::check_pace_config(pace.rule));
  return pace;
}

}  // namespace

Result<SimConfig> parse_sim_config(const nlohmann::json& config) {
  SimConfig c;
  ObjectReader r(config, "sim");
  r.text("data_dir", c.data_dir)
      .text("bandwidth_trace", c.bandwidth_trace)
      .text("fleet_csv", c.fleet_csv)
      .integer("frequency_order_period", c.frequency_order_period)
      .number("max_virtual_s", c.max_virtual_s, 0, kInf)
      .integer("eval_samples", c.eval_samples)
      .integer("sustained_evaluations", c.sustained_evaluations, 1, 1000)
      .number("heartbeat_s", c.heartbeat_s, 1e-3, 89)
      .number("idle_wait_s", c.idle_wait_s, 1e-3, kInf)
      .number("duration_sigma", c.duration_sigma, 0, 10)
      .require("job");
  if (const nlohmann::json* order = r.member("frequency_order")) {
    if (!order->is_string()) return invalid_argument("sim.frequency_order must be a string");
    auto parsed = client::parse_frequency_order(order->get<std::string>());
    if (!parsed.ok()) return invalid_argument("sim.frequency_order: " + parsed.status().message());
    c.frequency_order = *parsed;
  }
  if (const nlohmann::json* stop = r.member("stop_at_target")) {
    if (!stop->is_boolean()) return invalid_argument("sim.stop_at_target must be a boolean");
    c.stop_at_target = stop->get<bool>();
  }
  if (const nlohmann::json* fleet = r.member("fleet")) {
    auto parsed = parse_fleet_params(*fleet);
    if (!parsed.ok()) return parsed.status();
    c.fleet = *parsed;
  }
  if (const nlohmann::json* pace = r.member("pace")) {
    auto parsed = parse_pace(*pace);
    if (!parsed.ok()) return parsed.status();
    c.pace = *parsed;
  }
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  auto job = rounds::build_job(*r.member("job"));
  if (!job.ok()) return job.status();
  if (job->config.init_from) {
    return invalid_argument("job.init_from names a coordinator's job: a simulation starts fresh");
  }
  c.job = std::move(job->config);
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
