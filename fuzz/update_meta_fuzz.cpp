// Fuzzes the update metadata path of an upload: the X-Fedcase-Meta header text through
// parse_untrusted_json (common/json_read.h), as server/api.cpp does, then parse_update_meta
// (server/update_meta.h). Input: the header's value. Accepted metadata must hold what the
// parser promises: samples > 0 and every time and loss finite and >= 0, and an evaluation
// report with samples > 0, at most 16 metrics, every score finite and >= 0, accuracy <= 1.

#include <cmath>

#include "common/json_read.h"
#include "fuzz/fuzz_target.h"
#include "server/update_meta.h"

FEDCASE_FUZZ_TARGET(update_meta) {
  auto json = fedcase::parse_untrusted_json(fedcase::fuzz::as_text(data, size));
  if (!json.ok()) return 0;
  auto meta = fedcase::server::parse_update_meta(*json);
  if (!meta.ok()) return 0;
  if (meta->samples == 0) fedcase::fuzz::fuzz_fail("accepted metadata with samples == 0");
  for (double x :
       {meta->loss_sum, meta->loss_sq_sum, meta->compute_s, meta->io_s, meta->download_s}) {
    if (!std::isfinite(x) || x < 0) fedcase::fuzz::fuzz_fail("accepted a bad metadata number");
  }
  if (!meta->evaluation) return 0;
  const fedcase::rounds::EvalReport& e = *meta->evaluation;
  if (e.samples == 0 || e.metrics.size() > fedcase::rounds::kMaxEvalMetrics ||
      !std::isfinite(e.loss) || e.loss < 0) {
    fedcase::fuzz::fuzz_fail("accepted a bad evaluation report");
  }
  for (const auto& [name, value] : e.metrics) {
    if (!std::isfinite(value) || value < 0 || (name == "accuracy" && value > 1)) {
      fedcase::fuzz::fuzz_fail("accepted a bad evaluation metric");
    }
  }
  return 0;
}
