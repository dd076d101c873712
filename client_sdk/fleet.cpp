#include "client_sdk/fleet.h"

#include <filesystem>

#include "ml/model.h"

namespace fedcase::client {

Result<std::unique_ptr<Fleet>> Fleet::start(const FleetConfig& config) {
  if (!config.data) return invalid_argument("fleet needs a dataset");
  FEDCASE_RETURN_IF_ERROR(validate(config.storage));
  auto parts =
      ml::dirichlet_partition(config.data->labels, config.clients, config.alpha, config.seed);
  if (!parts.ok()) return parts.status();
  std::unique_ptr<Fleet> fleet(new Fleet());
  auto slots = config.concurrent_training
                   ? std::make_shared<ComputeSlots>(config.concurrent_training)
                   : nullptr;
  for (size_t i = 0; i < config.clients; ++i) {
    SessionConfig s;
    s.coordinator = config.coordinator;
    s.enrollment_token = config.enrollment_token;
    s.name = "client-" + std::to_string(i);
    s.data = config.data;
    s.indices = std::move((*parts)[i]);
    s.device = {{"kind", "simulated"}, {"fleet_index", i}};
    s.seed = config.seed * 1000003 + i;
    s.poll_wait_s = config.poll_wait_s;
    s.compute_slots = slots;
    if (!config.state_dir.empty()) {
      s.state_dir = (std::filesystem::path(config.state_dir) / s.name).string();
    }
    s.storage = config.storage;
    s.cache_capacity_bytes = config.cache_capacity_bytes;
    fleet->sessions_.push_back(std::make_unique<Session>(std::move(s)));
  }
  for (auto& session : fleet->sessions_) {
    fleet->threads_.emplace_back([&session, &stop = fleet->stop_] {
      ml::set_torch_threads(1);  // many clients share the cores: one torch thread each
      session->run(stop);
    });
  }
  return fleet;
}

Fleet::~Fleet() { stop(); }

void Fleet::stop() {
  stop_ = true;
  for (auto& t : threads_) t.join();
  threads_.clear();
}

uint64_t Fleet::rounds_trained() const {
  return sum([](const SessionStats& s) { return s.rounds_trained.load(); });
}

uint64_t Fleet::updates_accepted() const {
  return sum([](const SessionStats& s) { return s.updates_accepted.load(); });
}

uint64_t Fleet::updates_skipped() const {
  return sum([](const SessionStats& s) { return s.updates_skipped.load(); });
}

}  // namespace fedcase::client
