#include "server/core/rounds/replication.h"

namespace fedcase::server {
namespace {

// A single coordinator: its rounds are its own, served and decided here alone.
class LocalReplication final : public RoundReplication {
 public:
  explicit LocalReplication(storage::Store& store) : store_(store) {}

  bool shared() const override { return false; }
  const std::string& replica() const override { return kNoName; }
  void wake() override {}

  Status open(storage::RoundRecord record, const rounds::Round&) override {
    record.target = 0;  // admission is decided in memory
    record.plan = nlohmann::json::object();
    return store_.open_round(record);
  }
  Status replan(JobId, RoundIndex, const nlohmann::json&, storage::Epoch) override {
    return not_shared();
  }

  Result<bool> admit(storage::UpdateRecord update) override {
    update.replica.clear();
    return store_.admit_update(update);
  }
  Status withdraw(JobId job, RoundIndex round, ClientId client) override {
    return store_.withdraw_update(job, round, client, kNoName);
  }
  Result<bool> delivered_elsewhere(JobId, RoundIndex, ClientId) override { return false; }

  Status close(JobId, RoundIndex, storage::Epoch) override { return ok_status(); }

  Contributions contributions(JobId, RoundIndex, std::optional<double>, double) override {
    return {0, true, false};
  }
  Result<Gathered> gather(JobId, RoundIndex) override { return Gathered{}; }
  Status put_partial(storage::PartialRecord) override { return not_shared(); }

  Status publish_stage(JobId, RoundIndex, const char*,
                       const std::map<ClientId, std::string>&) override {
    return ok_status();
  }
  Status relay(JobId, RoundIndex, const char*, ClientId, const std::string&) override {
    return not_shared();
  }
  Result<std::map<ClientId, std::string>> relayed(JobId, RoundIndex, const char*) override {
    return std::map<ClientId, std::string>();
  }
  Result<std::map<ClientId, std::string>> published(JobId, RoundIndex, const char*) override {
    return std::map<ClientId, std::string>();
  }
  Result<Followed> followed(JobId, double) override { return Followed(); }
  uint64_t wakes() const override { return 0; }
  std::optional<double> next_reading(double) const override { return std::nullopt; }

 private:
  static Status not_shared() {
    return internal_error("a single coordinator shares no round with other replicas");
  }

  static inline const std::string kNoName;
  storage::Store& store_;
};

}  // namespace

std::unique_ptr<RoundReplication> local_replication(storage::Store& store) {
  return std::make_unique<LocalReplication>(store);
}

}  // namespace fedcase::server
