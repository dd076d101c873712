#include "ml/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>

namespace fedcase::ml {
namespace {

Result<std::string> read_gzip(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    return not_found("dataset file " + path + " not found (install dataset-fashion-mnist)");
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return internal_error("cannot open " + path);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  bool failed = n < 0;
  gzclose(f);
  if (failed) return invalid_argument(path + " is not a valid gzip file");
  return out;
}

uint32_t big_endian_u32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint32_t(uint8_t(s[at + 3]));
}

// Parses an IDX file of unsigned bytes with `rank` dimensions; returns dims and payload.
Result<std::pair<std::vector<uint32_t>, std::string>> parse_idx(const std::string& bytes,
                                                                uint32_t rank,
                                                                const std::string& path) {
  const size_t header = 4 + 4 * rank;
  if (bytes.size() < header || big_endian_u32(bytes, 0) != (0x0800u | rank)) {
    return invalid_argument(path + " is not an IDX file of rank " + std::to_string(rank));
  }
  std::vector<uint32_t> dims(rank);
  uint64_t count = 1;
  for (uint32_t i = 0; i < rank; ++i) count *= dims[i] = big_endian_u32(bytes, 4 + 4 * i);
  if (bytes.size() != header + count) {
    return invalid_argument(path + " has " + std::to_string(bytes.size() - header) +
                            " data bytes, expected " + std::to_string(count));
  }
  return std::make_pair(dims, bytes.substr(header));
}

}  // namespace

Result<Dataset> load_fashion_mnist(const std::string& dir, Split split) {
  const std::string prefix = dir + (split == Split::kTrain ? "/train" : "/t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  auto images_raw = read_gzip(images_path);
  if (!images_raw.ok()) return images_raw.status();
  auto labels_raw = read_gzip(labels_path);
  if (!labels_raw.ok()) return labels_raw.status();
  auto images = parse_idx(*images_raw, 3, images_path);
  if (!images.ok()) return images.status();
  auto labels = parse_idx(*labels_raw, 1, labels_path);
  if (!labels.ok()) return labels.status();
  if (images->first[0] != labels->first[0]) {
    return invalid_argument("image and label counts differ in " + dir);
  }
  Dataset d;
  d.rows = images->first[1];
  d.cols = images->first[2];
  d.pixels.assign(images->second.begin(), images->second.end());
  d.labels.assign(labels->second.begin(), labels->second.end());
  for (uint8_t l : d.labels) {
    if (l >= kNumClasses) return invalid_argument("label out of range in " + labels_path);
  }
  return d;
}

Dataset head(const Dataset& data, size_t n) {
  n = std::min(n, data.size());
  Dataset d;
  d.rows = data.rows;
  d.cols = data.cols;
  d.pixels.assign(data.pixels.begin(), data.pixels.begin() + n * data.image_bytes());
  d.labels.assign(data.labels.begin(), data.labels.begin() + n);
  return d;
}

Result<std::vector<std::vector<size_t>>> dirichlet_partition(const std::vector<uint8_t>& labels,
                                                             size_t clients, double alpha,
                                                             uint64_t seed, size_t min_samples) {
  if (clients == 0) return invalid_argument("partition needs at least one client");
  if (!(alpha > 0)) return invalid_argument("Dirichlet alpha must be > 0");
  if (clients * min_samples > labels.size()) {
    return invalid_argument("not enough samples for " + std::to_string(clients) + " clients");
  }
  std::vector<std::vector<size_t>> by_class(kNumClasses);
  for (size_t i = 0; i < labels.size(); ++i) by_class[labels[i]].push_back(i);

  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gamma(alpha, 1.0);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::vector<std::vector<size_t>> parts(clients);
    for (auto indices : by_class) {
      std::shuffle(indices.begin(), indices.end(), rng);
      std::vector<double> p(clients);
      for (auto& x : p) x = gamma(rng);
      double total = std::accumulate(p.begin(), p.end(), 0.0);
      size_t start = 0;
      double cumulative = 0;
      for (size_t c = 0; c < clients; ++c) {
        cumulative += p[c] / total;
        size_t end = c + 1 == clients ? indices.size()
                                      : std::min(indices.size(), size_t(cumulative * indices.size()));
        parts[c].insert(parts[c].end(), indices.begin() + start, indices.begin() + end);
        start = end;
      }
    }
    bool big_enough = std::all_of(parts.begin(), parts.end(),
                                  [&](const auto& p) { return p.size() >= min_samples; });
    if (big_enough) {
      for (auto& p : parts) std::sort(p.begin(), p.end());
      return parts;
    }
  }
  return invalid_argument("could not draw a partition with " + std::to_string(min_samples) +
                          " samples per client; raise alpha or lower the client count");
}

}  // namespace fedcase::ml
