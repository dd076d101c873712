// The C interface's overhead against the C++ SDK on the same round (its C++ and C half;
// binding_bench.py adds the Python binding's and prints the combined figures): one local round
// of the demo (the built-in CNN, ~114k parameters, on 600 Fashion-MNIST records of 785 bytes,
// batches of 32, uniform sampling, no cache), run through LocalData::train_round by
//   cpp_null  a C++ trainer that only reads every record, reports each batch's losses and
//             returns the parameters: the pipeline's own cost
//   c_null    the same through fedcase_local_data_train_round and C callbacks: the C
//             interface's cost per round (callback dispatch, per-record and per-batch calls,
//             the parameters' copies)
//   cpp_cnn   the built-in CNN trainer (BuiltinTrainer): a real round; its "outside" time is
//             the round's wall time less the time inside Trainer::train
//   c_cnn     the same trainer called from a C train callback over the C samples
// Each is run --rounds times (after one warm-up round); medians. One libtorch thread.
//   build/bench/binding_bench/binding_bench [--rounds 5] [--samples 600]
// Prints one JSON object (its last line).

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client_sdk/builtin_trainer.h"
#include "client_sdk/fedcase_client.h"
#include "client_sdk/local_data.h"
#include "ml/dataset.h"
#include "ml/model.h"

namespace {

using namespace fedcase;
using namespace fedcase::client;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Reads every record, reports a loss per sample per batch, returns the parameters.
class NullTrainer final : public Trainer {
 public:
  Status prepare(const ModelInfo&) override { return ok_status(); }
  Result<std::vector<float>> train(const std::vector<float>& parameters, RoundSamples& samples,
                                   const TrainSettings& settings) override {
    std::vector<float> losses;
    for (size_t first = 0; first < samples.size(); first += settings.batch_size) {
      const size_t end = std::min(samples.size(), first + settings.batch_size);
      losses.assign(end - first, 1.0f);
      for (size_t p = first; p < end; ++p) {
        auto record = samples.read(p);
        if (!record.ok()) return record.status();
      }
      samples.report_losses(first, losses);
    }
    return parameters;
  }
  Result<Evaluation> evaluate(const std::vector<float>&, RoundSamples&) override {
    return Evaluation{};
  }
};

// Delegates to a trainer and adds up the seconds spent inside its train().
class TimedTrainer final : public Trainer {
 public:
  explicit TimedTrainer(Trainer& inner) : inner_(inner) {}
  double inside_s = 0;
  Status prepare(const ModelInfo& m) override { return inner_.prepare(m); }
  Result<std::vector<float>> train(const std::vector<float>& parameters, RoundSamples& samples,
                                   const TrainSettings& settings) override {
    const auto start = Clock::now();
    auto r = inner_.train(parameters, samples, settings);
    inside_s += seconds_since(start);
    return r;
  }
  Result<Evaluation> evaluate(const std::vector<float>& p, RoundSamples& s) override {
    return inner_.evaluate(p, s);
  }

 private:
  Trainer& inner_;
};

// The C samples as a C++ trainer reads them.
class CSamples final : public RoundSamples {
 public:
  explicit CSamples(fedcase_samples* samples) : samples_(samples) {}
  size_t size() const override { return fedcase_samples_size(samples_); }
  size_t id(size_t position) const override { return fedcase_samples_id(samples_, position); }
  Result<std::string_view> read(size_t position) override {
    const uint8_t* data;
    size_t size;
    if (fedcase_samples_read(samples_, position, &data, &size) != FEDCASE_OK) {
      return internal_error(fedcase_last_error());
    }
    return std::string_view(reinterpret_cast<const char*>(data), size);
  }
  void report_losses(size_t first, const std::vector<float>& losses) override {
    (void)fedcase_samples_report_losses(samples_, first, losses.data(), losses.size());
  }

 private:
  fedcase_samples* samples_;
};

// A C trainer (callbacks) around a C++ trainer: what an app in C with its own model code does.
struct CTrainer {
  Trainer* inner;
  double inside_s = 0;  // inside the inner trainer's train()
};

int c_train(void* user, const float* parameters, size_t count, fedcase_samples* samples,
            const fedcase_train_settings* settings, float* out) {
  auto* t = static_cast<CTrainer*>(user);
  CSamples view(samples);
  TrainSettings s;
  s.batch_size = settings->batch_size;
  s.lr = settings->lr;
  s.momentum = settings->momentum;
  s.weight_decay = settings->weight_decay;
  s.prox_mu = settings->prox_mu;
  // The parameters arrive as a pointer; a C++ trainer takes a vector (a copy the C app, not
  // the interface, makes: a C trainer reads the pointer).
  const std::vector<float> in(parameters, parameters + count);
  const auto start = Clock::now();
  auto trained = t->inner->train(in, view, s);
  t->inside_s += seconds_since(start);
  if (!trained.ok()) return FEDCASE_INTERNAL;
  std::memcpy(out, trained->data(), count * sizeof(float));
  return FEDCASE_OK;
}

// The same read-and-report loop as NullTrainer, written against the C interface.
int c_null_train(void*, const float* parameters, size_t count, fedcase_samples* samples,
                 const fedcase_train_settings* settings, float* out) {
  const size_t n = fedcase_samples_size(samples);
  std::vector<float> losses;
  for (size_t first = 0; first < n; first += settings->batch_size) {
    const size_t end = std::min(n, first + settings->batch_size);
    losses.assign(end - first, 1.0f);
    for (size_t p = first; p < end; ++p) {
      const uint8_t* data;
      size_t size;
      if (int rc = fedcase_samples_read(samples, p, &data, &size); rc != FEDCASE_OK) return rc;
    }
    if (int rc = fedcase_samples_report_losses(samples, first, losses.data(), losses.size());
        rc != FEDCASE_OK) {
      return rc;
    }
  }
  std::memcpy(out, parameters, count * sizeof(float));
  return FEDCASE_OK;
}

int c_prepare(void*, const fedcase_model_info*) { return FEDCASE_OK; }
int c_evaluate(void*, const float*, size_t, fedcase_samples*, fedcase_evaluation*) {
  return FEDCASE_OK;
}

struct Figures {
  double round_s = 0;
  double outside_s = 0;  // the round less the trainer's own work
};

}  // namespace

int main(int argc, char** argv) {
  size_t rounds = 5, samples = 600;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--rounds")
      rounds = std::stoul(argv[i + 1]);
    else if (flag == "--samples")
      samples = std::stoul(argv[i + 1]);
    else {
      std::cerr << "usage: binding_bench [--rounds N] [--samples N]\n";
      return 2;
    }
  }
  ml::set_torch_threads(1);
  auto data = ml::load_fashion_mnist(ml::kDefaultFashionMnistDir, ml::Split::kTrain);
  if (!data.ok()) {
    std::cerr << data.status().to_string() << "\n";
    return 1;
  }
  std::vector<std::string> records;
  for (size_t i = 0; i < samples; ++i)
    records.push_back(fashion_record(*data, i * 97 % data->size()));
  auto model = ml::Model::create("cnn", 1);
  const std::vector<float> parameters = model->parameters();
  const ModelInfo info{"cnn", "cross_entropy", nullptr, model->layout()};
  TrainSettings settings;
  settings.batch_size = 32;
  settings.lr = 0.05;
  settings.momentum = 0.9;
  const fedcase_train_settings c_settings{32, 0.05, 0.9, 0, 0};
  DataDirectives directives;  // uniform, one epoch, no cache: the demo's rounds
  fedcase_directives c_directives{};
  c_directives.struct_size = sizeof c_directives;
  c_directives.epochs = 1;
  c_directives.repetition_factor = 1;

  MemorySource cpp_source(records);
  LocalDataConfig config;
  config.source = &cpp_source;
  auto local = LocalData::open(config);
  auto run_cpp = [&](Trainer& trainer, const std::function<double()>& inside) {
    std::vector<Figures> out;
    for (size_t r = 0; r <= rounds; ++r) {
      const double before = inside();
      const auto start = Clock::now();
      auto trained = (*local)->train_round(trainer, parameters, settings, directives);
      const double round_s = seconds_since(start);
      if (!trained.ok()) throw std::runtime_error(trained.status().to_string());
      if (r > 0) out.push_back({round_s, round_s - (inside() - before)});
    }
    return out;
  };

  fedcase_source_callbacks source_callbacks{};
  source_callbacks.struct_size = sizeof source_callbacks;
  source_callbacks.user_data = &records;
  source_callbacks.count = [](void* u) {
    return static_cast<std::vector<std::string>*>(u)->size();
  };
  source_callbacks.sample_bytes = [](void* u, size_t id) -> uint64_t {
    return (*static_cast<std::vector<std::string>*>(u))[id].size();
  };
  source_callbacks.read = [](void* u, size_t id, fedcase_record* out) {
    const std::string& r = (*static_cast<std::vector<std::string>*>(u))[id];
    return fedcase_record_assign(out, r.data(), r.size());
  };
  fedcase_source* c_source = nullptr;
  fedcase_local_data* c_local = nullptr;
  if (fedcase_source_new(&source_callbacks, &c_source) != FEDCASE_OK ||
      fedcase_local_data_open(c_source, 1, nullptr, 0, &c_local) != FEDCASE_OK) {
    std::cerr << fedcase_last_error() << "\n";
    return 1;
  }
  auto run_c = [&](fedcase_trainer* trainer, const std::function<double()>& inside) {
    std::vector<Figures> out;
    std::vector<float> trained(parameters.size());
    for (size_t r = 0; r <= rounds; ++r) {
      const double before = inside();
      const auto start = Clock::now();
      const int rc =
          fedcase_local_data_train_round(c_local, trainer, parameters.data(), parameters.size(),
                                         &c_settings, &c_directives, trained.data(), nullptr);
      const double round_s = seconds_since(start);
      if (rc != FEDCASE_OK) throw std::runtime_error(fedcase_last_error());
      if (r > 0) out.push_back({round_s, round_s - (inside() - before)});
    }
    return out;
  };
  auto c_trainer = [&](void* user, decltype(&c_train) train) {
    fedcase_trainer_callbacks c{};
    c.struct_size = sizeof c;
    c.user_data = user;
    c.prepare = c_prepare;
    c.train = train;
    c.evaluate = c_evaluate;
    fedcase_trainer* t = nullptr;
    if (fedcase_trainer_new(&c, &t) != FEDCASE_OK) throw std::runtime_error(fedcase_last_error());
    return t;
  };

  NullTrainer null_trainer;
  auto cpp_null = run_cpp(null_trainer, [] { return 0.0; });
  fedcase_trainer* c_null_trainer = c_trainer(nullptr, c_null_train);
  auto c_null = run_c(c_null_trainer, [] { return 0.0; });

  auto cnn = make_builtin_trainer(1);
  if (Status s = cnn->prepare(info); !s.ok()) throw std::runtime_error(s.to_string());
  TimedTrainer timed(*cnn);
  auto cpp_cnn = run_cpp(timed, [&] { return timed.inside_s; });
  CTrainer c_cnn_state{cnn.get()};
  fedcase_trainer* c_cnn_trainer = c_trainer(&c_cnn_state, c_train);
  auto c_cnn = run_c(c_cnn_trainer, [&] { return c_cnn_state.inside_s; });

  auto med = [](const std::vector<Figures>& f, double Figures::*field) {
    std::vector<double> v;
    for (const Figures& x : f) v.push_back(x.*field);
    return median(v);
  };
  const double cnn_round = med(cpp_cnn, &Figures::round_s);
  const double params_bytes = double(parameters.size() * sizeof(float));
  nlohmann::json out = {
      {"samples", samples},
      {"rounds", rounds},
      {"parameters", parameters.size()},
      {"record_bytes", records[0].size()},
      {"cpp_null_round_s", med(cpp_null, &Figures::round_s)},
      {"c_null_round_s", med(c_null, &Figures::round_s)},
      {"cpp_cnn_round_s", cnn_round},
      {"cpp_cnn_outside_s", med(cpp_cnn, &Figures::outside_s)},
      {"c_cnn_round_s", med(c_cnn, &Figures::round_s)},
      {"c_cnn_outside_s", med(c_cnn, &Figures::outside_s)},
      // What the C interface adds to a round: its null round less the C++ one, against the
      // C++ CNN round.
      {"c_overhead_fraction_of_cnn_round",
       (med(c_null, &Figures::round_s) - med(cpp_null, &Figures::round_s)) / cnn_round},
      // Bytes the interface copies per round in a session: none of the parameters in (the
      // callback gets a pointer to the SDK's model), none of the records (a pointer into the
      // cache or read buffer); out, the trainer writes the SDK's buffer (its one copy).
      {"c_parameter_bytes_copied_in", 0},
      {"c_parameter_bytes_copied_out", params_bytes},
      {"c_record_bytes_copied", 0},
  };
  fedcase_trainer_free(c_null_trainer);
  fedcase_trainer_free(c_cnn_trainer);
  fedcase_local_data_free(c_local);
  fedcase_source_free(c_source);
  std::cout << out.dump() << std::endl;
  return 0;
}
