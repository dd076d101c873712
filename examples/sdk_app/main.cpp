// An edge app on the fedcase client SDK: one device that trains the job's TorchScript model on
// its own data files and scores it on its own held-out files when the coordinator asks.
//
//   sdk_app --port 8080 --token ENROLLMENT_TOKEN --data data/device-0/train
//           [--held-out data/device-0/held-out] [--input-shape 8] [--host 127.0.0.1]
//           [--ca CA.pem] [--state-dir DIR] [--name NAME] [--seconds S]
//
// Sample files hold float32 values: the input (8 readings here), then the class
// (docs/client_sdk.md, "Sample records"). Runs until SIGINT or SIGTERM, or for S seconds,
// printing a line whenever it trained a round.

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client_sdk/session.h"
#include "client_sdk/torchscript_trainer.h"

namespace {

std::atomic<bool> stop{false};

void on_signal(int) { stop = true; }

struct Options {
  fedcase::client::ConnectionOptions coordinator;
  std::string token, data, held_out, state_dir, name = "sdk-app";
  std::vector<int64_t> input_shape{8};
  double seconds = 0;  // 0: until a signal
};

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> shape;
  std::stringstream in(text);
  for (std::string d; std::getline(in, d, ',');) shape.push_back(std::stoll(d));
  return shape;
}

Options parse(int argc, char** argv) {
  Options o;
  if (const char* env = std::getenv("FEDCASE_ENROLLMENT_TOKEN")) o.token = env;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--host")
      o.coordinator.host = value;
    else if (flag == "--port")
      o.coordinator.port = static_cast<uint16_t>(std::stoul(value));
    else if (flag == "--ca")
      o.coordinator.ca_file = value;
    else if (flag == "--token")
      o.token = value;
    else if (flag == "--data")
      o.data = value;
    else if (flag == "--held-out")
      o.held_out = value;
    else if (flag == "--input-shape")
      o.input_shape = parse_shape(value);
    else if (flag == "--state-dir")
      o.state_dir = value;
    else if (flag == "--name")
      o.name = value;
    else if (flag == "--seconds")
      o.seconds = std::stod(value);
    else
      throw std::invalid_argument("unknown flag " + flag);
  }
  if (o.data.empty()) throw std::invalid_argument("--data FOLDER is required");
  if (o.token.empty())
    throw std::invalid_argument("--token (or FEDCASE_ENROLLMENT_TOKEN) is required");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fedcase::client;
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "sdk_app: " << e.what() << "\n";
    return 2;
  }
  auto fail = [](const fedcase::Status& s) {
    std::cerr << "sdk_app: " << s.to_string() << "\n";
    return 1;
  };

  SessionConfig config;
  config.coordinator = o.coordinator;
  config.enrollment_token = o.token;
  config.name = o.name;
  config.state_dir = o.state_dir;
  config.device = {{"kind", "example-app"}};
  auto trainer = make_torchscript_trainer({o.input_shape});
  if (!trainer.ok()) return fail(trainer.status());
  config.trainer = std::move(trainer).value();
  auto train = FolderSource::open(o.data);
  if (!train.ok()) return fail(train.status());
  config.train_data = std::move(train).value();
  if (!o.held_out.empty()) {
    auto held_out = FolderSource::open(o.held_out);
    if (!held_out.ok()) return fail(held_out.status());
    config.eval_data = std::move(held_out).value();
  }
  const size_t samples = config.train_data->count();
  auto session = Session::create(std::move(config));
  if (!session.ok()) return fail(session.status());

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::cout << o.name << ": " << samples << " training samples, connecting to "
            << o.coordinator.host << ":" << o.coordinator.port << std::endl;
  std::thread worker([&] { (*session)->run(stop); });
  const auto start = std::chrono::steady_clock::now();
  uint64_t reported = 0;
  while (!stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const SessionStats& stats = (*session)->stats();
    if (stats.rounds_trained > reported) {
      reported = stats.rounds_trained;
      std::cout << o.name << ": trained " << reported << " round(s), " << stats.updates_accepted
                << " update(s) accepted" << std::endl;
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o.seconds > 0 && elapsed >= o.seconds) stop = true;
  }
  worker.join();
  return 0;
}
