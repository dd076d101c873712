#include "aggregation/server_optimizer.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "aggregation/state_codec.h"
#include "common/json_read.h"

namespace fedcase::aggregation {
namespace {

enum class Kind { kFedAvg, kFedAvgM, kFedAdam, kFedYogi, kFedAdagrad };

struct Hyper {
  double lr = 1.0;
  double momentum = 0.9;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double tau = 1e-3;
};

// One class for the five rules: they differ only in how many moment vectors they keep and in
// the per-element update, chosen once per step outside the element loop.
class MomentOptimizer : public ServerOptimizer {
 public:
  MomentOptimizer(Kind kind, std::string name, Hyper hyper)
      : kind_(kind), name_(std::move(name)), hyper_(hyper) {}

  std::string name() const override { return name_; }

  Status step(std::vector<float>& global, const std::vector<float>& mean_delta) override {
    if (global.size() != mean_delta.size()) {
      return invalid_argument("delta has " + std::to_string(mean_delta.size()) +
                              " parameters, model has " + std::to_string(global.size()));
    }
    const size_t n = global.size();
    if (kind_ != Kind::kFedAvg) {
      if (m_.empty()) {
        initialise(n);
      } else if (m_.size() != n) {
        return invalid_argument(name_ + " state has " + std::to_string(m_.size()) +
                                " parameters, model has " + std::to_string(n));
      }
    }
    switch (kind_) {
      case Kind::kFedAvg:
        for (size_t i = 0; i < n; ++i) global[i] = next(global[i], hyper_.lr * mean_delta[i]);
        break;
      case Kind::kFedAvgM:
        for (size_t i = 0; i < n; ++i) {
          m_[i] = static_cast<float>(hyper_.momentum * m_[i] + mean_delta[i]);
          global[i] = next(global[i], hyper_.lr * m_[i]);
        }
        break;
      case Kind::kFedAdam:
        adaptive_step(global, mean_delta,
                      [b2 = hyper_.beta2](double v, double d2) { return b2 * v + (1 - b2) * d2; });
        break;
      case Kind::kFedYogi:
        adaptive_step(global, mean_delta, [b2 = hyper_.beta2](double v, double d2) {
          const double diff = v - d2;
          const double sign = diff > 0 ? 1.0 : (diff < 0 ? -1.0 : 0.0);
          return v - (1 - b2) * d2 * sign;
        });
        break;
      case Kind::kFedAdagrad:
        adaptive_step(global, mean_delta, [](double v, double d2) { return v + d2; });
        break;
    }
    return ok_status();
  }

  std::string save_state() const override {
    StateWriter writer(name_);
    writer.put_floats(m_);
    writer.put_floats(v_);
    return writer.finish();
  }

  Status load_state(std::string_view state) override {
    if (state.empty()) {
      m_.clear();
      v_.clear();
      return ok_status();
    }
    auto reader = StateReader::open(state, name_);
    if (!reader.ok()) return reader.status();
    std::vector<float> m, v;
    FEDCASE_RETURN_IF_ERROR(reader->get_floats(m));
    FEDCASE_RETURN_IF_ERROR(reader->get_floats(v));
    FEDCASE_RETURN_IF_ERROR(reader->finish());
    const bool sizes_ok = kind_ == Kind::kFedAvg    ? m.empty() && v.empty()
                          : kind_ == Kind::kFedAvgM ? v.empty()
                                                    : m.size() == v.size();
    if (!sizes_ok) return invalid_argument("saved " + name_ + " state has inconsistent sizes");
    m_ = std::move(m);
    v_ = std::move(v);
    return ok_status();
  }

 private:
  void initialise(size_t n) {
    m_.assign(n, 0.0f);
    if (kind_ != Kind::kFedAvgM) v_.assign(n, static_cast<float>(hyper_.tau * hyper_.tau));
  }

  static float next(float x, double change) { return static_cast<float>(x + change); }

  template <class SecondMoment>
  void adaptive_step(std::vector<float>& global, const std::vector<float>& delta,
                     SecondMoment second_moment) {
    const double b1 = hyper_.beta1;
    for (size_t i = 0; i < global.size(); ++i) {
      const double d = delta[i];
      m_[i] = static_cast<float>(b1 * m_[i] + (1 - b1) * d);
      v_[i] = static_cast<float>(second_moment(v_[i], d * d));
      global[i] = next(global[i], hyper_.lr * m_[i] / (std::sqrt(double{v_[i]}) + hyper_.tau));
    }
  }

  Kind kind_;
  std::string name_;
  Hyper hyper_;
  std::vector<float> m_;  // first moment (momentum); empty before the first step and for fedavg
  std::vector<float> v_;  // second moment; adaptive rules only
};

struct KindInfo {
  const char* name;
  Kind kind;
};

const KindInfo kKinds[] = {
    {"fedavg", Kind::kFedAvg},   {"fedavgm", Kind::kFedAvgM},       {"fedadam", Kind::kFedAdam},
    {"fedyogi", Kind::kFedYogi}, {"fedadagrad", Kind::kFedAdagrad},
};

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

Result<std::unique_ptr<ServerOptimizer>> make_server_optimizer(const nlohmann::json& config) {
  ObjectReader r(config, "server_optimizer");
  std::string name = "fedavg";
  r.text("name", name);
  FEDCASE_RETURN_IF_ERROR(r.status());
  const KindInfo* info = nullptr;
  for (const KindInfo& k : kKinds) {
    if (name == k.name) info = &k;
  }
  if (info == nullptr) {
    return invalid_argument(
        "server_optimizer.name must be \"fedavg\", \"fedavgm\", \"fedadam\", \"fedyogi\" or "
        "\"fedadagrad\", not \"" +
        name + "\"");
  }

  // Only this optimizer's keys are read, so strict_status() refuses the keys of the others. The
  // reads check types and closed bounds; the open bounds are checked after.
  Hyper hyper;
  const Kind kind = info->kind;
  const bool adaptive = kind != Kind::kFedAvg && kind != Kind::kFedAvgM;
  if (adaptive) hyper.lr = 0.01;
  r.number("lr", hyper.lr, 0, kInf);
  if (kind == Kind::kFedAvgM) r.number("momentum", hyper.momentum, 0, 1);
  if (adaptive) r.number("beta1", hyper.beta1, 0, 1);
  if (kind == Kind::kFedAdam || kind == Kind::kFedYogi) r.number("beta2", hyper.beta2, 0, 1);
  if (adaptive) r.number("tau", hyper.tau, 0, kInf);
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  for (auto [key, value] : {std::pair<const char*, double>{"lr", hyper.lr}, {"tau", hyper.tau}}) {
    if (!(value > 0 && value < kInf)) {
      return invalid_argument(r.path(key) + " must be a number in (0, inf)");
    }
  }
  for (auto [key, value] : {std::pair<const char*, double>{"momentum", hyper.momentum},
                            {"beta1", hyper.beta1},
                            {"beta2", hyper.beta2}}) {
    if (!(value < 1)) return invalid_argument(r.path(key) + " must be a number in [0, 1)");
  }
  return std::unique_ptr<ServerOptimizer>(new MomentOptimizer(kind, name, hyper));
}

}  // namespace fedcase::aggregation
