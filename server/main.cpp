// fedcase-coordinator --config configs/coordinator.json
// Serves the client and admin APIs until SIGINT or SIGTERM.

#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "common/log.h"
#include "server/service.h"
#include "storage/store.h"

int main(int argc, char** argv) {
  using namespace fedcase;
  std::string config_path = "configs/coordinator.json";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (arg == "--help" || arg == "-h") {
      std::cout << "usage: fedcase-coordinator [--config configs/coordinator.json]\n"
                   "Tokens may come from FEDCASE_ADMIN_TOKEN and FEDCASE_ENROLLMENT_TOKEN.\n";
      return 0;
    } else {
      std::cerr << "fedcase-coordinator: unknown argument '" << arg << "' (try --help)\n";
      return 2;
    }
  }
  server::CoordinatorConfig config;
  try {
    config = server::load_coordinator_config(config_path);
  } catch (const std::exception& e) {
    std::cerr << "fedcase-coordinator: " << e.what() << "\n";
    return 2;
  }
  // An SQLite file's folder is created if needed (the config's URL parsed when it was read).
  auto url = storage::parse_store_url(config.database);
  if (url.ok() && url->scheme == "sqlite") {
    auto db_dir = std::filesystem::path(url->location).parent_path();
    if (!db_dir.empty()) std::filesystem::create_directories(db_dir);
  }

  // Block the stop signals before any thread starts so that only sigwait sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto service = server::CoordinatorService::start(config);
  if (!service.ok()) {
    std::cerr << "fedcase-coordinator: " << service.status().to_string() << "\n";
    return 1;
  }
  int received = 0;
  sigwait(&signals, &received);
  log_info(std::string("received ") + strsignal(received) +
           ", draining: finishing requests in flight, then concluding open rounds");
  (*service)->stop();
  return 0;
}
