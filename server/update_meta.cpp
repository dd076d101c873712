#include "server/update_meta.h"

#include <cmath>
#include <string>

namespace fedcase::server {

Result<UpdateMeta> parse_update_meta(const nlohmann::json& meta) {
  if (!meta.is_object()) return invalid_argument("update metadata must be a JSON object");
  UpdateMeta m;
  auto count = [&](const char* key, uint64_t& out) -> Status {
    auto v = meta.find(key);
    if (v == meta.end()) return ok_status();
    if (!v->is_number_integer() || v->get<int64_t>() < 0) {
      return invalid_argument(std::string("update metadata '") + key + "' must be an integer >= 0");
    }
    out = v->get<uint64_t>();
    return ok_status();
  };
  auto number = [&](const char* key, double& out) -> Status {
    auto v = meta.find(key);
    if (v == meta.end()) return ok_status();
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0) {
      return invalid_argument(std::string("update metadata '") + key +
                              "' must be a finite number >= 0");
    }
    out = v->get<double>();
    return ok_status();
  };
  if (!meta.contains("samples")) return invalid_argument("update metadata needs 'samples'");
  FEDCASE_RETURN_IF_ERROR(count("samples", m.samples));
  if (m.samples == 0) return invalid_argument("update metadata 'samples' must be > 0");
  FEDCASE_RETURN_IF_ERROR(number("loss_sum", m.loss_sum));
  FEDCASE_RETURN_IF_ERROR(number("loss_sq_sum", m.loss_sq_sum));
  FEDCASE_RETURN_IF_ERROR(number("compute_s", m.compute_s));
  FEDCASE_RETURN_IF_ERROR(number("io_s", m.io_s));
  FEDCASE_RETURN_IF_ERROR(number("download_s", m.download_s));
  FEDCASE_RETURN_IF_ERROR(count("cache_hits", m.cache_hits));
  FEDCASE_RETURN_IF_ERROR(count("cache_misses", m.cache_misses));
  FEDCASE_RETURN_IF_ERROR(count("bytes_read", m.bytes_read));
  if (auto evaluation = meta.find("evaluation"); evaluation != meta.end()) {
    auto report = rounds::parse_eval_report(*evaluation);
    if (!report.ok()) return report.status();
    m.evaluation = std::move(report).value();
  }
  return m;
}

}  // namespace fedcase::server
