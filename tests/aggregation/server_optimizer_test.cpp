#include "aggregation/server_optimizer.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace fedcase;
using namespace fedcase::aggregation;

namespace {

// Reddi et al. 2021, Algorithm 2, written out in double for one coordinate at a time.
struct PaperReference {
  std::string rule;
  double lr, beta1, beta2, tau, momentum;
  std::vector<double> x, m, v;

  void step(const std::vector<double>& delta) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double d = delta[i];
      if (rule == "fedavgm") {
        m[i] = momentum * m[i] + d;
        x[i] += lr * m[i];
        continue;
      }
      m[i] = beta1 * m[i] + (1 - beta1) * d;
      if (rule == "fedadagrad") v[i] = v[i] + d * d;
      if (rule == "fedadam") v[i] = beta2 * v[i] + (1 - beta2) * d * d;
      if (rule == "fedyogi") {
        const double s = v[i] - d * d;
        v[i] = v[i] - (1 - beta2) * d * d * ((s > 0) - (s < 0));
      }
      x[i] += lr * m[i] / (std::sqrt(v[i]) + tau);
    }
  }
};

const std::vector<std::vector<double>> kDeltas = {{0.5, -0.25, 0.0, 0.02},
                                                  {0.4, 0.3, -0.1, 0.0},
                                                  {-0.2, 0.35, 0.05, 0.01},
                                                  {0.1, -0.6, 0.2, -0.03},
                                                  {0.0, 0.1, -0.4, 0.5}};

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

std::unique_ptr<ServerOptimizer> make(const nlohmann::json& config) {
  auto opt = make_server_optimizer(config);
  REQUIRE_MESSAGE(opt.ok(), opt.status().to_string());
  return std::move(*opt);
}

}  // namespace

TEST_CASE("fedavg server optimizer adds the scaled delta") {
  auto opt = make({{"name", "fedavg"}, {"lr", 0.5}});
  std::vector<float> global{1, 1}, delta{2, -4};
  REQUIRE(opt->step(global, delta).ok());
  CHECK(global[0] == doctest::Approx(2.0));
  CHECK(global[1] == doctest::Approx(-1.0));
  CHECK(opt->load_state(opt->save_state()).ok());
  CHECK_FALSE(make_server_optimizer({{"name", "sgd?"}}).ok());
  CHECK_FALSE(make_server_optimizer({{"lr", -1}}).ok());
}

TEST_CASE("adaptive optimizers and server momentum follow the paper's equations") {
  const double lr = 0.1, b1 = 0.9, b2 = 0.99, tau = 1e-3, mu = 0.9;
  for (std::string rule : {"fedavgm", "fedadam", "fedyogi", "fedadagrad"}) {
    CAPTURE(rule);
    nlohmann::json config = {{"name", rule}, {"lr", lr}};
    if (rule == "fedavgm") {
      config["momentum"] = mu;
    } else {
      config["beta1"] = b1;
      config["tau"] = tau;
      if (rule != "fedadagrad") config["beta2"] = b2;
    }
    auto opt = make(config);
    CHECK(opt->name() == rule);
    PaperReference ref{rule,
                       lr,
                       b1,
                       b2,
                       tau,
                       mu,
                       {1.0, -2.0, 0.5, 0.0},
                       std::vector<double>(4, 0.0),
                       std::vector<double>(4, tau * tau)};
    std::vector<float> global = to_float(ref.x);
    for (const auto& delta : kDeltas) {
      REQUIRE(opt->step(global, to_float(delta)).ok());
      ref.step(delta);
      for (size_t i = 0; i < global.size(); ++i) {
        CHECK(global[i] == doctest::Approx(ref.x[i]).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("yogi's second moment moves by a fixed step towards delta squared") {
  // One coordinate, tau = 0.1: v_{-1} = 0.01. A delta of 0.5 (0.25 > v) raises v by
  // (1 - b2) * 0.25; then a delta of 0.1 (0.01 < v) lowers it by (1 - b2) * 0.01.
  auto opt = make({{"name", "fedyogi"}, {"lr", 1.0}, {"beta1", 0.0}, {"beta2", 0.5}, {"tau", 0.1}});
  std::vector<float> x{0};
  REQUIRE(opt->step(x, {0.5f}).ok());
  const double v1 = 0.01 + 0.5 * 0.25;  // sign(0.01 - 0.25) = -1
  CHECK(x[0] == doctest::Approx(0.5 / (std::sqrt(v1) + 0.1)));
  REQUIRE(opt->step(x, {0.1f}).ok());
  const double v2 = v1 - 0.5 * 0.01;  // sign(v1 - 0.01) = +1
  CHECK(x[0] == doctest::Approx(0.5 / (std::sqrt(v1) + 0.1) + 0.1 / (std::sqrt(v2) + 0.1)));
}

TEST_CASE("save and load mid-run gives bit-identical subsequent steps") {
  for (std::string rule : {"fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad"}) {
    CAPTURE(rule);
    nlohmann::json config = {{"name", rule}};
    auto uninterrupted = make(config);
    auto before_restart = make(config);
    std::vector<float> a{1, -2, 0.5, 0}, b = a;
    for (size_t t = 0; t < 2; ++t) {
      REQUIRE(uninterrupted->step(a, to_float(kDeltas[t])).ok());
      REQUIRE(before_restart->step(b, to_float(kDeltas[t])).ok());
    }
    const std::string saved = before_restart->save_state();
    auto restarted = make(config);
    REQUIRE(restarted->load_state(saved).ok());
    CHECK(restarted->save_state() == saved);
    for (size_t t = 2; t < kDeltas.size(); ++t) {
      REQUIRE(uninterrupted->step(a, to_float(kDeltas[t])).ok());
      REQUIRE(restarted->step(b, to_float(kDeltas[t])).ok());
    }
    CHECK(a == b);
    CHECK(uninterrupted->save_state() == restarted->save_state());
  }
}

TEST_CASE("load_state rejects foreign, corrupted and mis-sized state") {
  auto adam = make({{"name", "fedadam"}});
  auto yogi = make({{"name", "fedyogi"}});
  std::vector<float> x{1, 2, 3};
  REQUIRE(adam->step(x, {0.1f, 0.2f, 0.3f}).ok());
  const std::string saved = adam->save_state();

  CHECK(yogi->load_state(saved).code() == Code::kInvalidArgument);  // another optimizer kind
  std::string flipped = saved;
  flipped[flipped.size() / 2] ^= 0x01;
  CHECK(adam->load_state(flipped).message().find("checksum") != std::string::npos);
  CHECK(adam->load_state(saved.substr(0, saved.size() - 1)).code() == Code::kInvalidArgument);
  CHECK(adam->load_state(saved + "x").code() == Code::kInvalidArgument);
  std::string future = saved;
  future[4] = 9;  // format version
  CHECK(adam->load_state(future).message().find("version") != std::string::npos);
  CHECK(adam->save_state() == saved);  // failed loads changed nothing

  // State for 3 parameters cannot step a 4-parameter model.
  std::vector<float> bigger{1, 2, 3, 4};
  CHECK(adam->step(bigger, {0, 0, 0, 0}).code() == Code::kInvalidArgument);
  CHECK(bigger == std::vector<float>{1, 2, 3, 4});
  CHECK(adam->step(x, {0.1f}).code() == Code::kInvalidArgument);

  // The empty state is the fresh optimizer.
  REQUIRE(adam->load_state("").ok());
  CHECK(adam->save_state() == make({{"name", "fedadam"}})->save_state());
  CHECK(adam->step(bigger, {0, 0, 0, 0}).ok());
}

TEST_CASE("optimizer configs are checked key by key") {
  CHECK(make_server_optimizer(nlohmann::json::object()).ok());
  CHECK(make_server_optimizer(
            {{"name", "fedadam"}, {"lr", 0.01}, {"beta1", 0.9}, {"beta2", 0.999}, {"tau", 1e-3}})
            .ok());
  auto message = [](const nlohmann::json& c) {
    return make_server_optimizer(c).status().message();
  };
  CHECK(message({{"name", "fedadam"}, {"momentum", 0.9}}) ==
        "unknown key server_optimizer.momentum");
  CHECK(message({{"name", "fedadagrad"}, {"beta2", 0.9}}) == "unknown key server_optimizer.beta2");
  CHECK(message({{"name", "fedavg"}, {"tau", 0.1}}) == "unknown key server_optimizer.tau");
  CHECK(message({{"name", "fedavgm"}, {"momentum", 1.0}}) ==
        "server_optimizer.momentum must be a number in [0, 1)");
  CHECK(message({{"name", "fedadam"}, {"beta1", -0.1}}).find("server_optimizer.beta1") !=
        std::string::npos);
  CHECK(message({{"name", "fedyogi"}, {"tau", 0}}) ==
        "server_optimizer.tau must be a number in (0, inf)");
  CHECK(message({{"lr", 0}}) == "server_optimizer.lr must be a number in (0, inf)");
  CHECK(
      message({{"name", "fedadam"}, {"lr", "fast"}}).find("server_optimizer.lr must be a number") !=
      std::string::npos);
  CHECK(message({{"name", 3}}) == "server_optimizer.name must be a string");
  CHECK(message({{"name", "sgd"}}).find("server_optimizer.name must be") != std::string::npos);
  CHECK(message({{"name", "sgd"}}).find("\"sgd\"") != std::string::npos);
  CHECK(message(nlohmann::json::array()) == "server_optimizer must be an object");
}
