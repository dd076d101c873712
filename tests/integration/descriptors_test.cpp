// A coordinator out of file descriptors: the accept loop backs off instead of spinning, the
// connections it has keep being answered, and it accepts again once descriptors are free.

#include <doctest/doctest.h>

#include <boost/asio.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/support/coordinator_harness.h"
#include "tests/support/coordinator_process.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

// CPU seconds (user + system) the process has used so far.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));  // after "pid (comm) "
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  }
  return ticks / double(sysconf(_SC_CLK_TCK));
}

}  // namespace

TEST_CASE("out of file descriptors, the coordinator backs off, keeps serving and recovers") {
  TempDir dir;
  const std::string config_path = dir.file("coordinator.json"), log_path = dir.file("log");
  std::ofstream(config_path) << json{
      {"port", 0},
      {"port_file", dir.file("port")},
      {"database", dir.file("fedcase.db")},
      {"admin_token", kAdminToken},
      {"enrollment_token", kEnrollmentToken},
      {"eval_data_dir", FEDCASE_FMNIST_DIR},
      {"eval_samples", 100},
      {"max_connections", 1000},
      {"requests_per_second", 1000}}.dump();
  CoordinatorProcess coordinator(config_path, log_path, /*max_open_files=*/64);
  const uint16_t port = wait_for_port(dir.file("port"));
  REQUIRE(port != 0);
  Caller kept(port, kAdminToken);
  REQUIRE(kept.get("/v1/admin/jobs").status == 200);  // a keep-alive connection, open before

  // Far more connections than descriptors: the kernel queues what the coordinator cannot accept.
  boost::asio::io_context io;
  std::vector<boost::asio::ip::tcp::socket> idle;
  for (int i = 0; i < 200; ++i) {
    idle.emplace_back(io);
    idle.back().connect({boost::asio::ip::make_address("127.0.0.1"), port});
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double cpu_before = cpu_seconds(coordinator.pid());
  const auto log_before = std::filesystem::file_size(log_path);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double spent = cpu_seconds(coordinator.pid()) - cpu_before;
  const auto logged = std::filesystem::file_size(log_path) - log_before;
  MESSAGE("while out of descriptors: " << spent << " CPU s and " << logged << " log bytes in 2 s");
  CHECK(spent < 0.5);     // no busy accept loop
  CHECK(logged < 10000);  // no log line per attempt
  std::ifstream log(log_path);
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  CHECK(text.find("retrying with backoff") != std::string::npos);

  // The connection it has is still answered.
  CHECK(kept.get("/v1/admin/jobs").status == 200);

  // Freed descriptors: new connections are accepted again.
  for (auto& socket : idle) socket.close();
  idle.clear();
  bool served = wait_until(
      [&] {
        Caller fresh(port, kAdminToken);
        return fresh.get("/v1/admin/jobs").status == 200;
      },
      20);
  CHECK(served);
}
