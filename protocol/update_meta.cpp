#include "protocol/update_meta.h"

#include "protocol/internal.h"

namespace fedcase::protocol {
namespace internal {

Status read(const nlohmann::json& value, const std::string& where, UpdateMeta& out, Keys* keys) {
  ObjectReader r(value, where);
  r.require("samples")
      .integer("samples", out.samples)
      .finite("loss_sum", out.loss_sum, 0)
      .finite("loss_sq_sum", out.loss_sq_sum, 0)
      .finite("compute_s", out.compute_s, 0)
      .finite("io_s", out.io_s, 0)
      .finite("download_s", out.download_s, 0)
      .integer("cache_hits", out.cache_hits)
      .integer("cache_misses", out.cache_misses)
      .integer("bytes_read", out.bytes_read);
  check(r, out.samples > 0, "samples", "must be >= 1");
  EvalReport evaluation;
  if (read_nested(r, "evaluation", evaluation)) out.evaluation = std::move(evaluation);
  return finish(r, keys);
}

}  // namespace internal

Result<UpdateMeta> read_update_meta(const nlohmann::json& meta) {
  return internal::read_message<UpdateMeta>(meta, "meta");
}

nlohmann::json write_update_meta(const UpdateMeta& m) {
  nlohmann::json out = {{"samples", m.samples},
                        {"loss_sum", m.loss_sum},
                        {"loss_sq_sum", m.loss_sq_sum},
                        {"compute_s", m.compute_s},
                        {"io_s", m.io_s},
                        {"download_s", m.download_s},
                        {"cache_hits", m.cache_hits},
                        {"cache_misses", m.cache_misses},
                        {"bytes_read", m.bytes_read}};
  if (m.evaluation) out["evaluation"] = write_eval_report(*m.evaluation);
  return out;
}

}  // namespace fedcase::protocol
