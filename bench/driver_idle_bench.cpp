// What the round driver costs while nothing is due: a coordinator with a large registered
// fleet and no round to open.
//
//   driver_idle_bench [--clients N] [--seconds S]
//
// A coordinator (SQLite in a temporary directory, its round driver's thread running) with N
// registered clients (default 10,000) is left alone for S seconds (default 60) twice: first
// with no job, then with one job waiting for more clients than the fleet has (it can never
// open). Reported: the process's CPU seconds in each window (getrusage), against what a driver
// ticking every 50 ms would have spent copying the fleet's profiles once a tick (1,200 copies a
// minute), with the time of one copy measured in the same run on a registry over the same
// store. Prints a summary and, as its last line, one JSON object.

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "bench/http_bench_util.h"
#include "ml/dataset.h"
#include "server/core/base/client_registry.h"
#include "server/core/base/evaluator.h"
#include "server/core/coordinator.h"
#include "tests/support/temp_dir.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using fedcase::bench::seconds_since;

[[noreturn]] void die(const std::string& what) { fedcase::bench::die("driver_idle_bench", what); }

template <class T>
T or_die(fedcase::Result<T> r, const char* what) {
  if (!r.ok()) die(std::string(what) + ": " + r.status().to_string());
  return std::move(r).value();
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// The CPU seconds the process spends in `seconds` of wall time left alone.
double idle_cpu(double seconds) {
  const double before = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  return cpu_seconds() - before;
}

}  // namespace

int main(int argc, char** argv) {
  size_t clients = 10000;
  double seconds = 60;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--clients" && i + 1 < argc) {
      clients = std::stoul(argv[++i]);
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::stod(argv[++i]);
    } else {
      die("usage: driver_idle_bench [--clients N] [--seconds S]");
    }
  }
  fedcase::testing::TempDir dir;
  const std::string database = dir.file("fedcase.db");
  const auto config = fedcase::server::parse_coordinator_config(
      {{"database", database},
       {"admin_token", fedcase::bench::kAdminToken},
       {"enrollment_token", fedcase::bench::kEnrollmentToken}});
  auto test_set = or_die(fedcase::ml::load_fashion_mnist("/usr/share/datasets/fashion-mnist",
                                                         fedcase::ml::Split::kTest),
                         "test set");
  auto coordinator = or_die(fedcase::server::Coordinator::open(
                                config, or_die(fedcase::storage::open_store(database), "store"),
                                std::make_unique<fedcase::server::TestSetEvaluator>(
                                    fedcase::ml::head(test_set, 100), 100, 1)),
                            "coordinator");
  const auto registering = Clock::now();
  for (size_t i = 0; i < clients; ++i) {
    or_die(coordinator->register_client({{"dataset_size", 100 + i % 500}}), "register");
    if ((i + 1) % 2000 == 0) std::cerr << "registered " << i + 1 << " clients\n";
  }
  const double register_s = seconds_since(registering);
  coordinator->start_driver();

  std::cerr << "idle, no job, for " << seconds << " s\n";
  const double no_job_cpu = idle_cpu(seconds);
  or_die(coordinator->create_job({{"name", "waiting"},
                                  {"model", "mlp"},
                                  {"clients_per_round", 10},
                                  {"min_clients", clients + 1}}),
         "job");
  std::cerr << "idle, one job waiting for " << clients + 1 << " clients, for " << seconds << " s\n";
  const double waiting_cpu = idle_cpu(seconds);
  coordinator->stop_driver();

  // What one tick of a fixed 50 ms driver copied: every profile of the fleet.
  auto store = or_die(fedcase::storage::open_store(database), "reader");
  fedcase::server::ClientRegistry registry(*store, {});
  if (!registry.load().ok()) die("cannot load the registry");
  const double now = fedcase::server::wall_clock();
  const int copies = 100;
  const auto copying = Clock::now();
  size_t copied = 0;
  for (int i = 0; i < copies; ++i) copied += registry.profiles(now).size();
  const double copy_s = seconds_since(copying) / copies;
  if (copied != clients * copies) die("the registry did not hold the fleet");
  const double tick_cpu = copy_s * (seconds / 0.05);

  std::printf("%zu clients registered in %.1f s\n", clients, register_s);
  std::printf("idle %.0f s, no job:          %.4f CPU s\n", seconds, no_job_cpu);
  std::printf("idle %.0f s, one job waiting: %.4f CPU s\n", seconds, waiting_cpu);
  std::printf(
      "one copy of the fleet's profiles: %.3f ms; a 50 ms tick's copies over %.0f s: "
      "%.2f CPU s\n",
      copy_s * 1e3, seconds, tick_cpu);
  const json out = {{"bench", "driver_idle"},
                    {"clients", clients},
                    {"seconds", seconds},
                    {"register_s", register_s},
                    {"idle_cpu_s_no_job", no_job_cpu},
                    {"idle_cpu_s_job_waiting", waiting_cpu},
                    {"profile_copy_ms", copy_s * 1e3},
                    {"fixed_tick_copy_cpu_s", tick_cpu},
                    {"ratio_no_job", no_job_cpu / tick_cpu},
                    {"ratio_job_waiting", waiting_cpu / tick_cpu}};
  std::cout << out.dump() << std::endl;
  return 0;
}
