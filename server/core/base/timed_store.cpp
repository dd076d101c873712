#include "server/core/base/timed_store.h"

#include <chrono>

namespace fedcase::server {
namespace {

using namespace storage;

// Runs `write` and records its latency under `operation`.
template <class Write>
auto timed_write(Metrics& metrics, const char* operation, Write write) {
  const auto start = std::chrono::steady_clock::now();
  auto result = write();
  metrics.observe(metric::kStoreWriteSeconds, {{"operation", operation}},
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return result;
}

class TimedStore : public Store {
 public:
  TimedStore(std::unique_ptr<Store> store, Metrics& metrics)
      : store_(std::move(store)), metrics_(metrics) {}

  Result<ClientId> add_client(const ClientRecord& client) override {
    return timed_write(metrics_, "add_client", [&] { return store_->add_client(client); });
  }
  Result<ClientRecord> get_client(ClientId id) override { return store_->get_client(id); }
  Result<ClientRecord> find_client(const std::string& token_hash) override {
    return store_->find_client(token_hash);
  }
  Result<std::vector<ClientRecord>> clients_changed_after(uint64_t after, size_t limit) override {
    return store_->clients_changed_after(after, limit);
  }
  Result<std::vector<ContactBatch>> contacts_after(uint64_t after, size_t limit) override {
    return store_->contacts_after(after, limit);
  }
  Status update_clients(const std::vector<ClientRecord>& clients) override {
    return timed_write(metrics_, "update_clients", [&] { return store_->update_clients(clients); });
  }
  Result<JobId> create_job(const JobRecord& job, const ModelRecord& initial_model,
                           const std::string& module) override {
    return timed_write(metrics_, "create_job",
                       [&] { return store_->create_job(job, initial_model, module); });
  }
  Result<std::string> get_job_module(JobId id) override { return store_->get_job_module(id); }
  Result<JobRecord> get_job(JobId id) override { return store_->get_job(id); }
  Result<TenantId> add_tenant(const TenantRecord& tenant) override {
    return timed_write(metrics_, "add_tenant", [&] { return store_->add_tenant(tenant); });
  }
  Result<std::vector<TenantRecord>> list_tenants() override { return store_->list_tenants(); }
  Result<std::vector<JobRecord>> list_jobs() override { return store_->list_jobs(); }
  Status set_job_state(JobId id, JobState state, Epoch epoch) override {
    return timed_write(metrics_, "set_job_state",
                       [&] { return store_->set_job_state(id, state, epoch); });
  }
  Status open_round(const RoundRecord& round) override {
    return timed_write(metrics_, "open_round", [&] { return store_->open_round(round); });
  }
  Result<bool> admit_update(const UpdateRecord& update) override {
    return timed_write(metrics_, "admit_update", [&] { return store_->admit_update(update); });
  }
  Status withdraw_update(JobId job, RoundIndex round, ClientId client,
                         const std::string& replica) override {
    return timed_write(metrics_, "withdraw_update",
                       [&] { return store_->withdraw_update(job, round, client, replica); });
  }
  Result<bool> has_update(JobId job, RoundIndex round, ClientId client) override {
    return store_->has_update(job, round, client);
  }
  Status update_round_plan(JobId job, RoundIndex round, const nlohmann::json& plan,
                           Epoch epoch) override {
    return timed_write(metrics_, "update_round_plan",
                       [&] { return store_->update_round_plan(job, round, plan, epoch); });
  }
  Status commit_round(const RoundRecord& round, const ModelRecord& model,
                      const nlohmann::json& policy_state) override {
    return timed_write(metrics_, "commit_round",
                       [&] { return store_->commit_round(round, model, policy_state); });
  }
  Status fail_round(const RoundRecord& round) override {
    return timed_write(metrics_, "fail_round", [&] { return store_->fail_round(round); });
  }
  Status add_round_metrics(JobId job, RoundIndex round, const nlohmann::json& metrics) override {
    return timed_write(metrics_, "add_round_metrics",
                       [&] { return store_->add_round_metrics(job, round, metrics); });
  }
  Result<std::vector<RoundRecord>> list_rounds(JobId job) override {
    return store_->list_rounds(job);
  }
  Result<std::vector<UpdateRecord>> list_updates(JobId job, RoundIndex round) override {
    return store_->list_updates(job, round);
  }
  Result<ModelRecord> get_model(JobId job, uint64_t version) override {
    return store_->get_model(job, version);
  }
  Result<ModelRecord> latest_model(JobId job) override { return store_->latest_model(job); }
  Status close_admission(JobId job, RoundIndex round, Epoch epoch) override {
    return timed_write(metrics_, "close_admission",
                       [&] { return store_->close_admission(job, round, epoch); });
  }
  Result<AdmissionRecord> round_admission(JobId job, RoundIndex round) override {
    return store_->round_admission(job, round);
  }
  Status put_partial(const PartialRecord& partial) override {
    return timed_write(metrics_, "put_partial", [&] { return store_->put_partial(partial); });
  }
  Result<std::vector<PartialRecord>> list_partials(JobId job, RoundIndex round) override {
    return store_->list_partials(job, round);
  }
  Status put_stage_messages(const std::vector<StageMessage>& messages) override {
    return timed_write(metrics_, "put_stage_messages",
                       [&] { return store_->put_stage_messages(messages); });
  }
  Result<std::vector<StageMessage>> list_stage_messages(JobId job, RoundIndex round,
                                                        const std::string& kind) override {
    return store_->list_stage_messages(job, round, kind);
  }
  Status put_used_keys(JobId job, RoundIndex round, const std::set<std::string>& keys,
                       uint64_t keep_rounds) override {
    return timed_write(metrics_, "put_used_keys",
                       [&] { return store_->put_used_keys(job, round, keys, keep_rounds); });
  }
  Result<std::set<std::string>> list_used_keys(JobId job) override {
    return store_->list_used_keys(job);
  }
  Result<UploadRecord> open_upload(const UploadRecord& upload) override {
    return timed_write(metrics_, "open_upload", [&] { return store_->open_upload(upload); });
  }
  Result<UploadRecord> get_upload(JobId job, RoundIndex round, const std::string& id) override {
    return store_->get_upload(job, round, id);
  }
  Status put_upload_chunk(JobId job, RoundIndex round, const std::string& id, uint64_t index,
                          std::string_view bytes, double seconds) override {
    return timed_write(metrics_, "put_upload_chunk", [&] {
      return store_->put_upload_chunk(job, round, id, index, bytes, seconds);
    });
  }
  Result<std::string> get_upload_chunk(JobId job, RoundIndex round, const std::string& id,
                                       uint64_t index) override {
    return store_->get_upload_chunk(job, round, id, index);
  }
  Status drop_upload(JobId job, RoundIndex round, const std::string& id) override {
    return timed_write(metrics_, "drop_upload", [&] { return store_->drop_upload(job, round, id); });
  }
  Result<LeaseRecord> acquire_lease(JobId job, const std::string& holder,
                                    double duration_s) override {
    return timed_write(metrics_, "acquire_lease",
                       [&] { return store_->acquire_lease(job, holder, duration_s); });
  }
  Result<LeaseRecord> renew_lease(JobId job, const std::string& holder, Epoch epoch,
                                  double duration_s) override {
    return timed_write(metrics_, "renew_lease",
                       [&] { return store_->renew_lease(job, holder, epoch, duration_s); });
  }
  Status release_lease(JobId job, const std::string& holder, Epoch epoch) override {
    return timed_write(metrics_, "release_lease",
                       [&] { return store_->release_lease(job, holder, epoch); });
  }
  Result<std::vector<LeaseRecord>> list_leases() override { return store_->list_leases(); }
  Result<TenantService> charge_tenant(const ServiceCharge& charge) override {
    return timed_write(metrics_, "charge_tenant", [&] { return store_->charge_tenant(charge); });
  }
  Result<std::vector<TenantService>> list_tenant_service() override {
    return store_->list_tenant_service();
  }
  Status notify(Channel channel, uint64_t id) override {
    return timed_write(metrics_, "notify", [&] { return store_->notify(channel, id); });
  }
  Result<std::unique_ptr<Listener>> listen() override { return store_->listen(); }
  Status ping() override { return store_->ping(); }

 private:
  std::unique_ptr<Store> store_;
  Metrics& metrics_;
};

}  // namespace

std::unique_ptr<storage::Store> timed_store(std::unique_ptr<storage::Store> store,
                                            Metrics& metrics) {
  return std::make_unique<TimedStore>(std::move(store), metrics);
}

}  // namespace fedcase::server
