#include "client_sdk/fleet.h"

#include <filesystem>

#include "client_sdk/builtin_trainer.h"
#include "ml/model.h"

namespace fedcase::client {
namespace {

std::vector<std::string> records_of(const ml::Dataset& data, const std::vector<size_t>& indices) {
  std::vector<std::string> records;
  for (size_t i : indices) records.push_back(fashion_record(data, i));
  return records;
}

// The client's training samples: in memory, or in a record file under `dir` (rewritten when
// it holds other samples or another record size) read through the emulated device.
Result<std::shared_ptr<SampleSource>> training_source(std::vector<std::string> records,
                                                      const FleetConfig& config,
                                                      const std::string& dir) {
  auto memory = std::make_shared<MemorySource>(std::move(records));
  if (dir.empty()) return std::shared_ptr<SampleSource>(memory);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return internal_error("cannot create " + dir + ": " + ec.message());
  auto file = record_file_of((std::filesystem::path(dir) / "samples.bin").string(), *memory,
                             config.sample_bytes, config.storage);
  if (!file.ok()) return file.status();
  return std::shared_ptr<SampleSource>(std::move(file).value());
}

}  // namespace

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
    const std::vector<size_t>& part = (*parts)[i];
    SessionConfig s;
    s.coordinator = config.coordinator;
    s.replicas = config.replicas;
    s.enrollment_token = config.enrollment_token;
    s.name = "client-" + std::to_string(i);
    s.trainer = make_builtin_trainer(config.seed);
    s.device = {{"kind", "simulated"}, {"fleet_index", i}};
    std::string dir;
    if (!config.state_dir.empty()) {
      dir = s.state_dir = (std::filesystem::path(config.state_dir) / s.name).string();
      if (config.storage.read_bytes_per_s > 0) {
        s.device["storage_read_bytes_per_s"] = config.storage.read_bytes_per_s;
      }
    }
    auto train = training_source(records_of(*config.data, part), config, dir);
    if (!train.ok()) return train.status();
    s.train_data = std::move(train).value();
    s.seed = config.seed * 1000003 + i;
    s.poll_wait_s = config.poll_wait_s;
    s.require_secure_aggregation = config.require_secure_aggregation;
    s.compute_slots = slots;
    s.cache_capacity_bytes = config.cache_capacity_bytes;
    auto session = Session::create(std::move(s));
    if (!session.ok()) return session.status();
    fleet->sessions_.push_back(std::move(session).value());
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

uint64_t Fleet::failovers() const {
  return sum([](const SessionStats& s) { return s.failovers.load(); });
}

uint64_t Fleet::download_resumes() const {
  return sum([](const SessionStats& s) { return s.download_resumes.load(); });
}

uint64_t Fleet::upload_resumes() const {
  return sum([](const SessionStats& s) { return s.upload_resumes.load(); });
}

uint64_t Fleet::chunk_bytes_sent() const {
  return sum([](const SessionStats& s) { return s.chunk_bytes_sent.load(); });
}

}  // namespace fedcase::client
