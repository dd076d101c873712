#pragma once
// The fleet model: what each simulated client is (data, compute, network, storage, cache,
// availability), drawn from parameters or read from a CSV in the same columns.
//
// A fleet is built in two steps:
//   1. device rows (DeviceRow): one per client, either drawn by draw_devices() from
//      FleetParams and a bandwidth trace, or parsed from a fleet CSV (parse_fleet_csv);
//   2. build_fleet(): each row's label mix and sample indices, and its availability spells.
// Pure: no file access (the caller reads the trace and CSV text). Deterministic in the seed.

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/ids.h"
#include "common/status.h"

namespace fedcase::sim {

// On/off availability. Online spells last Exp(mean_online) and offline ones Exp(mean_offline),
// both modulated by a day cycle: a spell starting at time t has its mean multiplied by
// 1 + amplitude * sin(2 pi (t + phase) / period) (offline) or 1 - amplitude * sin(...)
// (online), so clients are online longer and more often in their "evening".
struct AvailabilityParams {
  double median_online_s = 3600;   // per-client mean online spell: log-normal around this
  double median_offline_s = 3600;  // per-client mean offline spell: log-normal around this
  double sigma = 0.5;              // log-normal spread of both means across clients
  double period_s = 86400;         // the day
  double amplitude = 0.5;          // in [0, 1)
  double horizon_s = 86400 * 7;    // spells are generated up to here; the last state holds
};

struct FleetParams {
  size_t clients = 500;
  uint64_t seed = 1;
  // Data: sizes follow Pareto(min_samples, size_shape) capped at max_samples; each client's
  // label mix is Dirichlet(label_alpha) over the 10 classes.
  double label_alpha = 0.5;
  uint64_t min_samples = 30;
  uint64_t max_samples = 2000;
  double size_shape = 1.5;
  // Devices: log-normal across clients, median and sigma of ln.
  double compute_ms_median = 20;
  double compute_sigma = 0.7;
  double storage_mb_per_s_median = 10;  // slow flash (1 MB = 1e6 bytes)
  double storage_sigma = 0.8;
  double sample_bytes_median = 100e3;
  double sample_bytes_sigma = 0.3;
  double cache_fraction = 0.1;  // cache capacity as a fraction of the local data's bytes
  // Network from the trace: "shuffle" (a seeded permutation of the trace's rows) or "modulo"
  // (client i gets row i mod rows).
  std::string bandwidth_draw = "shuffle";
  AvailabilityParams availability;
};

// Parses a `fleet` config object (keys as the members above, availability nested).
// kInvalidArgument naming the key for an unknown key or a bad value.
Result<FleetParams> parse_fleet_params(const nlohmann::json& config);

struct Bandwidth {
  double download_kbps = 0;
  double upload_kbps = 0;
};

// Parses the M-Lab trace ("dl_kbps,ul_kbps" header, one client a line). kInvalidArgument for
// a malformed line or an empty trace.
Result<std::vector<Bandwidth>> parse_bandwidth_trace(const std::string& text);

// One client's device and habits: the columns of a fleet CSV, in this order.
struct DeviceRow {
  uint64_t samples = 0;               // local dataset size (> 0)
  double compute_ms_per_sample = 0;   // training cost per sample
  double download_kbps = 0;
  double upload_kbps = 0;
  double storage_mb_per_s = 0;        // storage read speed
  uint64_t sample_bytes = 0;          // bytes of one stored sample
  uint64_t cache_bytes = 0;           // cache capacity
  double mean_online_s = 0;
  double mean_offline_s = 0;
  double diurnal_phase_s = 0;
};

// The CSV header line (without newline) of a fleet file.
std::string fleet_csv_header();
// Header plus one row per client (client id = row number, from 1).
std::string fleet_csv(const std::vector<DeviceRow>& rows);
// Parses a fleet CSV: the header above, then rows; every value must be > 0 except
// cache_bytes and diurnal_phase_s (>= 0). kInvalidArgument naming the line otherwise.
Result<std::vector<DeviceRow>> parse_fleet_csv(const std::string& text);

// Draws params.clients rows. Precondition: `trace` is not empty.
std::vector<DeviceRow> draw_devices(const FleetParams& params, const std::vector<Bandwidth>& trace);

// Alternating online/offline spells. online_at(t) for t < 0 is the state at 0.
class Spells {
 public:
  Spells() = default;
  Spells(bool online_at_zero, std::vector<double> toggles);
  bool online_at(double t) const;
  // End of the online spell containing t (infinity when it lasts past the horizon).
  // Precondition: online_at(t).
  double online_until(double t) const;
  // The first time at or after t the client is online: t itself when online at t, infinity
  // when it stays offline past the horizon.
  double online_from(double t) const;
  const std::vector<double>& toggles() const { return toggles_; }

 private:
  bool online_at_zero_ = true;
  std::vector<double> toggles_;  // increasing times at which the state flips
};

struct SimClient {
  ClientId id = 0;  // from 1
  DeviceRow device;
  std::vector<size_t> samples;  // indices into the training set, in local order
  Spells spells;
};

// Materialises `rows`: each client's samples (a Dirichlet(label_alpha) label mix, each sample
// a uniform draw from its class's images of `labels`, with replacement across clients) and its
// spells. kInvalidArgument for no rows, empty `labels`, or a class-less label set.
Result<std::vector<SimClient>> build_fleet(const std::vector<DeviceRow>& rows,
                                           const FleetParams& params,
                                           const std::vector<uint8_t>& labels);

}  // namespace fedcase::sim
