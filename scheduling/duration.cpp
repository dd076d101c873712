#include "scheduling/duration.h"

#include <limits>

#include "common/json_read.h"

namespace fedcase::scheduling {
namespace {

double or_prior(const Smoothed& estimate, double prior) {
  return estimate.known() && estimate.mean > 0 ? estimate.mean : prior;
}

}  // namespace

ExpectedDuration expected_duration(const ClientProfile& p, const TaskShape& task,
                                   const DurationPriors& priors) {
  const double samples = static_cast<double>(task.samples);
  const double hit_ratio =
      p.cache_hit_ratio.known() ? p.cache_hit_ratio.mean : priors.cache_hit_ratio;
  ExpectedDuration d;
  d.compute_s = samples * or_prior(p.compute_ms_per_sample, priors.compute_ms_per_sample) / 1000.0;
  d.io_s = samples * (1.0 - hit_ratio) * or_prior(p.sample_bytes, priors.sample_bytes) /
           or_prior(p.storage_read_bytes_per_s, priors.storage_read_bytes_per_s);
  d.download_s = static_cast<double>(task.download_bytes) /
                 or_prior(p.download_bytes_per_s, priors.download_bytes_per_s);
  d.upload_s = static_cast<double>(task.upload_bytes) /
               or_prior(p.upload_bytes_per_s, priors.upload_bytes_per_s);
  return d;
}

Result<DurationPriors> parse_duration_priors(const nlohmann::json& config,
                                             const std::string& where) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr double kTiny = 1e-9;
  DurationPriors p;
  ObjectReader r(config, where);
  r.number("compute_ms_per_sample", p.compute_ms_per_sample, kTiny, kInf)
      .number("download_bytes_per_s", p.download_bytes_per_s, kTiny, kInf)
      .number("upload_bytes_per_s", p.upload_bytes_per_s, kTiny, kInf)
      .number("storage_read_bytes_per_s", p.storage_read_bytes_per_s, kTiny, kInf)
      .number("sample_bytes", p.sample_bytes, kTiny, kInf)
      .number("cache_hit_ratio", p.cache_hit_ratio, 0, 1);
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  return p;
}

}  // namespace fedcase::scheduling
