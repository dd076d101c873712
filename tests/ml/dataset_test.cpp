#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "ml/dataset.h"
#include "tests/support/temp_dir.h"

using namespace fedcase;
using namespace fedcase::ml;

TEST_CASE("Fashion-MNIST loads from the Debian package") {
  auto train = load_fashion_mnist(FEDCASE_FMNIST_DIR, Split::kTrain);
  REQUIRE_MESSAGE(train.ok(), train.status().to_string());
  CHECK(train->size() == 60000);
  CHECK(train->rows == 28);
  CHECK(train->cols == 28);
  CHECK(train->pixels.size() == 60000u * 784u);
  std::vector<size_t> per_class(kNumClasses);
  for (uint8_t l : train->labels) per_class[l]++;
  for (size_t c : per_class) CHECK(c == 6000);
  auto test = load_fashion_mnist(FEDCASE_FMNIST_DIR, Split::kTest);
  REQUIRE(test.ok());
  CHECK(test->size() == 10000);
  CHECK(head(*test, 5).size() == 5);
}

TEST_CASE("missing or malformed dataset files give clear errors") {
  CHECK(load_fashion_mnist("/nonexistent", Split::kTrain).status().code() == Code::kNotFound);
  testing::TempDir dir;
  // A real gzip of garbage where the IDX file should be.
  std::string cmd = "echo garbage | gzip > " + dir.file("t10k-images-idx3-ubyte.gz") +
                    " && cp " + dir.file("t10k-images-idx3-ubyte.gz") + " " +
                    dir.file("t10k-labels-idx1-ubyte.gz");
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto r = load_fashion_mnist(dir.path().string(), Split::kTest);
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message().find("not an IDX file") != std::string::npos);
}

TEST_CASE("Dirichlet partition is a seeded, disjoint, covering, non-IID split") {
  auto train = load_fashion_mnist(FEDCASE_FMNIST_DIR, Split::kTrain);
  REQUIRE(train.ok());
  auto parts = dirichlet_partition(train->labels, 100, 0.5, 42);
  REQUIRE(parts.ok());
  REQUIRE(parts->size() == 100);
  std::set<size_t> seen;
  size_t total = 0;
  double top2_share = 0;  // mean share of a client's samples in its two largest classes
  for (const auto& p : *parts) {
    CHECK(p.size() >= 10);
    total += p.size();
    seen.insert(p.begin(), p.end());
    std::vector<double> per_class(kNumClasses);
    for (size_t i : p) per_class[train->labels[i]]++;
    std::sort(per_class.rbegin(), per_class.rend());
    top2_share += (per_class[0] + per_class[1]) / p.size() / 100.0;
  }
  CHECK(total == 60000);
  CHECK(seen.size() == 60000);
  // alpha = 0.5 concentrates each client on a few classes (an IID split gives about 0.2).
  CHECK(top2_share > 0.45);
  auto again = dirichlet_partition(train->labels, 100, 0.5, 42);
  CHECK(*again == *parts);
  auto other = dirichlet_partition(train->labels, 100, 0.5, 43);
  CHECK(*other != *parts);
  auto iid = dirichlet_partition(train->labels, 10, 1000.0, 1);
  for (const auto& p : *iid) CHECK(p.size() == doctest::Approx(6000).epsilon(0.1));
  CHECK_FALSE(dirichlet_partition(train->labels, 0, 0.5, 1).ok());
  CHECK_FALSE(dirichlet_partition(train->labels, 10, 0.0, 1).ok());
}
