#pragma once
// Image classification data (Fashion-MNIST) as plain bytes, and its non-IID partitioning.
// No torch here: datasets are shared read-only between the clients of one process.

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace fedcase::ml {

inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int kNumClasses = 10;

struct Dataset {
  size_t rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // size() * rows * cols, row-major per image
  std::vector<uint8_t> labels;  // one per image, in [0, kNumClasses)
  size_t size() const { return labels.size(); }
  size_t image_bytes() const { return rows * cols; }
};

enum class Split { kTrain, kTest };

// Reads the gzipped IDX files (train-images-idx3-ubyte.gz, ...) of `split` from `dir`.
// kNotFound if a file is missing; kInvalidArgument if a file is not valid IDX or the image and
// label counts disagree.
Result<Dataset> load_fashion_mnist(const std::string& dir, Split split);

// The first `n` samples of `data` (all of it if n >= size()).
Dataset head(const Dataset& data, size_t n);

// Splits sample indices of `labels` among `clients` with label proportions drawn per class
// from Dirichlet(alpha): small alpha gives each client few classes. Every client gets at least
// `min_samples` (redrawing up to 1,000 times, then kInvalidArgument). Deterministic in `seed`.
Result<std::vector<std::vector<size_t>>> dirichlet_partition(const std::vector<uint8_t>& labels,
                                                             size_t clients, double alpha,
                                                             uint64_t seed,
                                                             size_t min_samples = 10);

}  // namespace fedcase::ml
