#include "sim/fleet.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/json_read.h"
#include "sim/random.h"

namespace fedcase::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTwoPi = 6.283185307179586;
constexpr size_t kClasses = 10;

// A seed for client `id`'s own stream, so one client's draws do not shift another's.
uint64_t client_seed(uint64_t seed, ClientId id, uint64_t stream) {
  return seed * 0x9E3779B97F4A7C15ull + id * 0xBF58476D1CE4E5B9ull + stream;
}

Status parse_availability(ObjectReader& parent, AvailabilityParams& out) {
  const nlohmann::json* member = parent.member("availability");
  if (member == nullptr) return ok_status();
  ObjectReader r(*member, parent.path("availability"));
  r.number("median_online_s", out.median_online_s, 1e-3, kInf)
      .number("median_offline_s", out.median_offline_s, 1e-3, kInf)
      .number("sigma", out.sigma, 0, 10)
      .number("period_s", out.period_s, 1e-3, kInf)
      .number("amplitude", out.amplitude, 0, 0.999)
      .number("horizon_s", out.horizon_s, 0, kInf);
  return r.strict_status();
}

// Splits one CSV line into fields.
std::vector<std::string> fields_of(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string field;
  while (std::getline(in, field, ',')) out.push_back(field);
  return out;
}

bool parse_number(const std::string& text, double& out) {
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0' && std::isfinite(out);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// The mean of a spell starting at `t` with base mean `mean`, modulated by the day cycle.
double modulated(double mean, double t, double phase, const AvailabilityParams& a, double sign) {
  return mean * (1 + sign * a.amplitude * std::sin(kTwoPi * (t + phase) / a.period_s));
}

Spells draw_spells(const DeviceRow& d, const AvailabilityParams& a, Rng& rng) {
  const double on = d.mean_online_s, off = d.mean_offline_s;
  const bool online = rng.unit() < on / (on + off);
  std::vector<double> toggles;
  bool state = online;
  // The first spell is a residual: memoryless, so it is drawn like any other.
  for (double t = 0; t < a.horizon_s; state = !state) {
    t += state ? exponential(rng, modulated(on, t, d.diurnal_phase_s, a, -1))
               : exponential(rng, modulated(off, t, d.diurnal_phase_s, a, +1));
    toggles.push_back(t);
  }
  return Spells(online, std::move(toggles));
}

}  // namespace

Result<FleetParams> parse_fleet_params(const nlohmann::json& config) {
  FleetParams p;
  ObjectReader r(config, "fleet");
  r.integer("clients", p.clients)
      .integer("seed", p.seed)
      .number("label_alpha", p.label_alpha, 1e-6, kInf)
      .integer("min_samples", p.min_samples)
      .integer("max_samples", p.max_samples)
      .number("size_shape", p.size_shape, 1e-3, kInf)
      .number("compute_ms_median", p.compute_ms_median, 1e-6, kInf)
      .number("compute_sigma", p.compute_sigma, 0, 10)
      .number("storage_mb_per_s_median", p.storage_mb_per_s_median, 1e-6, kInf)
      .number("storage_sigma", p.storage_sigma, 0, 10)
      .number("sample_bytes_median", p.sample_bytes_median, 1, kInf)
      .number("sample_bytes_sigma", p.sample_bytes_sigma, 0, 10)
      .number("cache_fraction", p.cache_fraction, 0, 1)
      .text("bandwidth_draw", p.bandwidth_draw);
  r.merge(parse_availability(r, p.availability));
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  if (p.clients == 0) return invalid_argument("fleet.clients must be > 0");
  if (p.min_samples == 0 || p.min_samples > p.max_samples) {
    return invalid_argument("fleet.min_samples must be in [1, max_samples]");
  }
  if (p.bandwidth_draw != "shuffle" && p.bandwidth_draw != "modulo") {
    return invalid_argument("fleet.bandwidth_draw must be \"shuffle\" or \"modulo\"");
  }
  return p;
}

Result<std::vector<Bandwidth>> parse_bandwidth_trace(const std::string& text) {
  std::vector<std::string> lines = lines_of(text);
  std::vector<Bandwidth> out;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> f = fields_of(lines[i]);
    Bandwidth b;
    if (f.size() != 2 || !parse_number(f[0], b.download_kbps) ||
        !parse_number(f[1], b.upload_kbps) || b.download_kbps <= 0 || b.upload_kbps <= 0) {
      return invalid_argument("bandwidth trace line " + std::to_string(i + 1) +
                              ": expected two positive numbers dl_kbps,ul_kbps");
    }
    out.push_back(b);
  }
  if (out.empty()) return invalid_argument("the bandwidth trace has no rows");
  return out;
}

std::string fleet_csv_header() {
  return "samples,compute_ms_per_sample,download_kbps,upload_kbps,storage_mb_per_s,"
         "sample_bytes,cache_bytes,mean_online_s,mean_offline_s,diurnal_phase_s";
}

std::string fleet_csv(const std::vector<DeviceRow>& rows) {
  std::string out = fleet_csv_header() + "\n";
  char line[320];
  for (const DeviceRow& d : rows) {
    std::snprintf(line, sizeof(line), "%llu,%.6g,%.6g,%.6g,%.6g,%llu,%llu,%.6g,%.6g,%.6g\n",
                  static_cast<unsigned long long>(d.samples), d.compute_ms_per_sample,
                  d.download_kbps, d.upload_kbps, d.storage_mb_per_s,
                  static_cast<unsigned long long>(d.sample_bytes),
                  static_cast<unsigned long long>(d.cache_bytes), d.mean_online_s,
                  d.mean_offline_s, d.diurnal_phase_s);
    out += line;
  }
  return out;
}

Result<std::vector<DeviceRow>> parse_fleet_csv(const std::string& text) {
  std::vector<std::string> lines = lines_of(text);
  if (lines.empty() || lines[0] != fleet_csv_header()) {
    return invalid_argument("a fleet CSV starts with the header " + fleet_csv_header());
  }
  std::vector<DeviceRow> rows;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> f = fields_of(lines[i]);
    double v[10];
    bool ok = f.size() == 10;
    for (size_t k = 0; ok && k < 10; ++k) ok = parse_number(f[k], v[k]);
    // cache_bytes (6) and diurnal_phase_s (9) may be 0; everything else must be positive.
    for (size_t k = 0; ok && k < 10; ++k) ok = (k == 6 || k == 9) ? v[k] >= 0 : v[k] > 0;
    if (!ok) {
      return invalid_argument("fleet CSV line " + std::to_string(i + 1) +
                              ": expected 10 numbers, positive except cache_bytes and "
                              "diurnal_phase_s");
    }
    rows.push_back({static_cast<uint64_t>(v[0]), v[1], v[2], v[3], v[4],
                    static_cast<uint64_t>(v[5]), static_cast<uint64_t>(v[6]), v[7], v[8], v[9]});
  }
  if (rows.empty()) return invalid_argument("the fleet CSV has no clients");
  return rows;
}

std::vector<DeviceRow> draw_devices(const FleetParams& p, const std::vector<Bandwidth>& trace) {
  Rng rng(p.seed);
  std::vector<size_t> trace_rows(trace.size());
  for (size_t i = 0; i < trace_rows.size(); ++i) trace_rows[i] = i;
  if (p.bandwidth_draw == "shuffle") scheduling::partial_shuffle(trace_rows, trace_rows.size(), rng);
  const AvailabilityParams& a = p.availability;
  std::vector<DeviceRow> rows(p.clients);
  for (size_t i = 0; i < p.clients; ++i) {
    DeviceRow& d = rows[i];
    const double size = std::min(pareto(rng, double(p.min_samples), p.size_shape),
                                 double(p.max_samples));
    d.samples = static_cast<uint64_t>(size);
    d.compute_ms_per_sample = lognormal(rng, p.compute_ms_median, p.compute_sigma);
    const Bandwidth& b = trace[trace_rows[i % trace_rows.size()]];
    d.download_kbps = b.download_kbps;
    d.upload_kbps = b.upload_kbps;
    d.storage_mb_per_s = lognormal(rng, p.storage_mb_per_s_median, p.storage_sigma);
    d.sample_bytes =
        std::max<uint64_t>(1, uint64_t(lognormal(rng, p.sample_bytes_median, p.sample_bytes_sigma)));
    d.cache_bytes = uint64_t(p.cache_fraction * double(d.samples * d.sample_bytes));
    d.mean_online_s = lognormal(rng, a.median_online_s, a.sigma);
    d.mean_offline_s = lognormal(rng, a.median_offline_s, a.sigma);
    d.diurnal_phase_s = rng.unit() * a.period_s;
  }
  return rows;
}

Spells::Spells(bool online_at_zero, std::vector<double> toggles)
    : online_at_zero_(online_at_zero), toggles_(std::move(toggles)) {}

bool Spells::online_at(double t) const {
  // Flips at or before t.
  const size_t flips = std::upper_bound(toggles_.begin(), toggles_.end(), t) - toggles_.begin();
  return online_at_zero_ != (flips % 2 == 1);
}

double Spells::online_until(double t) const {
  auto next = std::upper_bound(toggles_.begin(), toggles_.end(), t);
  return next == toggles_.end() ? kInf : *next;
}

double Spells::online_from(double t) const {
  return online_at(t) ? t : online_until(t);  // offline: its next flip brings it online
}

Result<std::vector<SimClient>> build_fleet(const std::vector<DeviceRow>& rows,
                                           const FleetParams& params,
                                           const std::vector<uint8_t>& labels) {
  if (rows.empty()) return invalid_argument("a fleet needs at least one client");
  std::vector<std::vector<size_t>> by_class(kClasses);
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < kClasses) by_class[labels[i]].push_back(i);
  }
  std::vector<double> present(kClasses);
  for (size_t c = 0; c < kClasses; ++c) present[c] = by_class[c].empty() ? 0 : 1;
  if (labels.empty() || std::all_of(present.begin(), present.end(), [](double x) { return x == 0; })) {
    return invalid_argument("the training labels hold no class to draw from");
  }
  std::vector<SimClient> fleet(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    SimClient& c = fleet[i];
    c.id = i + 1;
    c.device = rows[i];
    Rng data_rng(client_seed(params.seed, c.id, 1));
    std::vector<double> mix = dirichlet(data_rng, params.label_alpha, kClasses);
    for (size_t k = 0; k < kClasses; ++k) mix[k] *= present[k];
    if (std::all_of(mix.begin(), mix.end(), [](double x) { return x == 0; })) mix = present;
    c.samples.resize(c.device.samples);
    for (size_t& s : c.samples) {
      const std::vector<size_t>& pool = by_class[categorical(data_rng, mix)];
      s = pool[data_rng.below(pool.size())];
    }
    Rng spell_rng(client_seed(params.seed, c.id, 2));
    c.spells = draw_spells(c.device, params.availability, spell_rng);
  }
  return fleet;
}

}  // namespace fedcase::sim
