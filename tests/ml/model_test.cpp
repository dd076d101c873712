#include <doctest/doctest.h>

#include <numeric>

#include "ml/model.h"

using namespace fedcase;
using namespace fedcase::ml;

namespace {
const Dataset& train_set() {
  static Dataset d = std::move(load_fashion_mnist(FEDCASE_FMNIST_DIR, Split::kTrain)).value();
  return d;
}
const Dataset& test_set() {
  static Dataset d = std::move(load_fashion_mnist(FEDCASE_FMNIST_DIR, Split::kTest)).value();
  return d;
}
std::vector<size_t> first(size_t n) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}
}  // namespace

TEST_CASE("models are seeded and their parameters round-trip through blob layout") {
  set_torch_threads(1);
  auto a = Model::create("cnn", 1);
  auto b = Model::create("cnn", 1);
  auto c = Model::create("cnn", 2);
  REQUIRE(a.ok());
  CHECK(a->parameters() == b->parameters());
  CHECK(a->parameters() != c->parameters());
  ModelLayout layout = a->layout();
  CHECK(layout.tensors.front().name == "conv1.weight");
  CHECK(layout.tensors.front().shape == std::vector<uint64_t>{16, 1, 5, 5});
  CHECK(layout.element_count() == a->parameters().size());
  REQUIRE(c->set_parameters(a->parameters()).ok());
  CHECK(c->parameters() == a->parameters());
  CHECK(c->set_parameters({1, 2, 3}).code() == Code::kUnprocessable);
  CHECK(Model::create("resnet", 1).status().code() == Code::kInvalidArgument);
}

TEST_CASE("local SGD on a Fashion-MNIST slice raises test accuracy") {
  set_torch_threads(1);
  auto model = Model::create("cnn", 3);
  REQUIRE(model.ok());
  EvalResult before = model->evaluate(test_set(), 1000);
  size_t batches = 0;
  TrainStats stats = model->train(train_set(), first(2000), {32, 0.05, 0.9},
                                  [&](const std::vector<size_t>& idx, const std::vector<float>& l) {
                                    CHECK(idx.size() == l.size());
                                    ++batches;
                                  });
  EvalResult after = model->evaluate(test_set(), 1000);
  CHECK(stats.samples == 2000);
  CHECK(batches == 63);
  CHECK(stats.loss_sq_sum >= stats.loss_sum * stats.loss_sum / stats.samples);
  CHECK(stats.compute_seconds > 0);
  CHECK(before.accuracy < 0.3);
  CHECK(after.accuracy > 0.6);
  CHECK(after.loss < before.loss);
  CHECK(after.samples == 1000);
}

TEST_CASE("FedProx's proximal term keeps the model closer to its start") {
  set_torch_threads(1);
  auto plain = Model::create("mlp", 4);
  auto prox = Model::create("mlp", 4);
  REQUIRE(plain.ok());
  std::vector<float> start = plain->parameters();
  plain->train(train_set(), first(1000), {32, 0.1});
  TrainOptions options{32, 0.1};
  options.prox_mu = 10.0;
  prox->train(train_set(), first(1000), options);
  auto distance = [&](const std::vector<float>& p) {
    double s = 0;
    for (size_t i = 0; i < p.size(); ++i) s += (p[i] - start[i]) * (p[i] - start[i]);
    return s;
  };
  CHECK(distance(prox->parameters()) < distance(plain->parameters()));
}
