#include "client_sdk/update_encoding.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace fedcase::client {

ModelBlob carried_part(uint64_t version, const ModelLayout& layout,
                       const std::vector<float>& values, const std::vector<std::string>& names) {
  if (names.empty()) return ModelBlob{version, layout, values};
  ModelBlob part{version, {}, {}};
  for_each_named(layout, names, [&](const TensorSpec& tensor, size_t offset) {
    part.layout.tensors.push_back(tensor);
    part.data.insert(part.data.end(), values.begin() + offset,
                     values.begin() + offset + tensor.element_count());
  });
  return part;
}

ModelLayout carried_layout(const ModelLayout& layout, const std::vector<std::string>& names) {
  if (names.empty()) return layout;
  ModelLayout out;
  for_each_named(layout, names, [&](const TensorSpec& tensor, size_t) {
    out.tensors.push_back(tensor);
  });
  return out;
}

std::vector<uint32_t> top_k_indices(const std::vector<float>& values, size_t k) {
  std::vector<uint32_t> order(values.size());
  std::iota(order.begin(), order.end(), uint32_t{0});
  auto larger = [&](uint32_t a, uint32_t b) {
    const float x = std::fabs(values[a]), y = std::fabs(values[b]);
    return x > y || (x == y && a < b);
  };
  if (k < order.size()) {
    std::nth_element(order.begin(), order.begin() + k, order.end(), larger);
    order.resize(k);
  }
  std::sort(order.begin(), order.end());
  return order;
}

uint64_t update_body_bytes(const ModelLayout& layout,
                           const std::optional<protocol::Compression>& compression) {
  const ModelBlob empty{0, layout, {}};
  const uint64_t n = layout.element_count();
  // The header (an encoding of no values, whose element count field reads 0) and the values.
  const uint64_t header = encode_blob(empty).size();
  if (!compression || (compression->kind == "top_k" && n > std::numeric_limits<uint32_t>::max())) {
    return header + n * sizeof(float);
  }
  if (compression->kind == "q8") {
    const uint64_t blocks = (n + compression->block - 1) / compression->block;
    return header + sizeof(uint32_t) + blocks * 2 * sizeof(float) + n;
  }
  const uint64_t k =
      std::min<uint64_t>(n, std::max<uint64_t>(1, uint64_t(std::ceil(compression->fraction * double(n)))));
  return header + sizeof(uint64_t) + k * (sizeof(uint32_t) + sizeof(float));
}

std::string UpdateEncoder::encode(JobId job, uint64_t version, const ModelLayout& layout,
                                  std::vector<float> delta,
                                  const std::optional<protocol::Compression>& compression) {
  ++updates_;
  const bool indexable = delta.size() <= std::numeric_limits<uint32_t>::max();
  if (!compression || (compression->kind == "top_k" && !indexable)) {
    return encode_blob(ModelBlob{version, layout, std::move(delta)});
  }
  if (compression->kind == "q8") {
    return encode_blob_quantized(ModelBlob{version, layout, std::move(delta)},
                                 compression->block, seed_ ^ (updates_ * 0x9e3779b97f4a7c15ull));
  }
  std::vector<float>& residual = residuals_[job];
  if (residual.size() == delta.size()) {
    for (size_t i = 0; i < delta.size(); ++i) delta[i] += residual[i];
  }
  const size_t k = std::min(
      delta.size(),
      std::max<size_t>(1, size_t(std::ceil(compression->fraction * double(delta.size())))));
  const std::vector<uint32_t> sent = top_k_indices(delta, k);
  std::string body = encode_blob_sparse(ModelBlob{version, layout, delta}, sent);
  for (uint32_t i : sent) delta[i] = 0;
  residual = std::move(delta);
  return body;
}

}  // namespace fedcase::client
