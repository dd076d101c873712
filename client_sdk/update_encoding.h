#pragma once
// How a session encodes a task's update for upload: as float32, or compressed as its job asks
// (protocol::Compression; docs/aggregation.md, "Compressed updates"). Top-k sparsification
// keeps, per job, the residual it did not send and adds it to the job's next update (error
// feedback), so every value is sent eventually.
//
// Not thread-safe: one session's thread uses it.

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/blob.h"
#include "common/ids.h"
#include "protocol/task_offer.h"

namespace fedcase::client {

// Calls fn(tensor, offset) for each tensor of `layout` named in `names`, in the layout's
// order, with the offset of its first value among the model's.
template <class Fn>
void for_each_named(const ModelLayout& layout, const std::vector<std::string>& names, Fn fn) {
  size_t offset = 0;
  for (const TensorSpec& tensor : layout.tensors) {
    if (std::find(names.begin(), names.end(), tensor.name) != names.end()) fn(tensor, offset);
    offset += tensor.element_count();
  }
}

// The part of a model an update carries: the tensors of `layout` named in `names` (every
// tensor when `names` is empty), in the layout's order, with their values taken from `values`
// (`layout`'s), as a model blob of `version`.
ModelBlob carried_part(uint64_t version, const ModelLayout& layout,
                       const std::vector<float>& values, const std::vector<std::string>& names);
// Its layout alone.
ModelLayout carried_layout(const ModelLayout& layout, const std::vector<std::string>& names);

// The indices of the k values of `values` largest in magnitude (ties: the lower index), in
// increasing order. k <= values.size().
std::vector<uint32_t> top_k_indices(const std::vector<float>& values, size_t k);

// The size of the body encode() makes for an update of `layout` compressed as `compression`
// (nullopt: float32), without encoding it: what a simulated client uploads.
uint64_t update_body_bytes(const ModelLayout& layout,
                           const std::optional<protocol::Compression>& compression);

class UpdateEncoder {
 public:
  // `seed` drives 8-bit quantisation's random rounding.
  explicit UpdateEncoder(uint64_t seed) : seed_(seed) {}

  // The upload body (a model blob) of `delta`, the update of job `job` trained on model
  // `version` of `layout`, compressed as `compression` says (nullopt: float32). Top-k sends
  // ceil(fraction x n) values (at least 1) of delta plus the job's residual, and keeps the
  // rest as the new residual. A model of 2^32 values or more is sent as float32 by top-k
  // (its indices are 32-bit).
  std::string encode(JobId job, uint64_t version, const ModelLayout& layout,
                     std::vector<float> delta,
                     const std::optional<protocol::Compression>& compression);

 private:
  uint64_t seed_;
  uint64_t updates_ = 0;  // encoded so far: each quantisation draws afresh
  std::map<JobId, std::vector<float>> residuals_;
};

}  // namespace fedcase::client
