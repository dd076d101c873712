#include "tests/support/failing_store.h"

#include <chrono>
#include <thread>
#include <utility>

namespace fedcase::testing {
namespace {

using namespace storage;

class FailingStore : public Store {
 public:
  FailingStore(std::unique_ptr<Store> store, std::shared_ptr<StoreFaults> faults)
      : store_(std::move(store)), faults_(std::move(faults)) {}

  Result<ClientId> add_client(const ClientRecord& client) override {
    return call(StoreMethod::kAddClient, [&] { return store_->add_client(client); });
  }
  Result<ClientRecord> get_client(ClientId id) override {
    return call(StoreMethod::kGetClient, [&] { return store_->get_client(id); });
  }
  Result<ClientRecord> find_client(const std::string& token_hash) override {
    return call(StoreMethod::kFindClient, [&] { return store_->find_client(token_hash); });
  }
  Result<std::vector<ClientRecord>> clients_changed_after(uint64_t after, size_t limit) override {
    return call(StoreMethod::kListClients,
                [&] { return store_->clients_changed_after(after, limit); });
  }
  Status update_clients(const std::vector<ClientRecord>& clients) override {
    return call(StoreMethod::kUpdateClients, [&] { return store_->update_clients(clients); });
  }
  Result<std::vector<ContactBatch>> contacts_after(uint64_t after, size_t limit) override {
    return call(StoreMethod::kContactsAfter, [&] { return store_->contacts_after(after, limit); });
  }
  Result<JobId> create_job(const JobRecord& job, const ModelRecord& initial_model,
                           const std::string& module) override {
    return call(StoreMethod::kCreateJob,
                [&] { return store_->create_job(job, initial_model, module); });
  }
  Result<std::string> get_job_module(JobId id) override {
    return call(StoreMethod::kGetJobModule, [&] { return store_->get_job_module(id); });
  }
  Result<JobRecord> get_job(JobId id) override {
    return call(StoreMethod::kGetJob, [&] { return store_->get_job(id); });
  }
  Result<std::vector<JobRecord>> list_jobs() override {
    return call(StoreMethod::kListJobs, [&] { return store_->list_jobs(); });
  }
  Status set_job_state(JobId id, JobState state, Epoch epoch) override {
    return call(StoreMethod::kSetJobState, [&] { return store_->set_job_state(id, state, epoch); });
  }
  Result<TenantId> add_tenant(const TenantRecord& tenant) override {
    return call(StoreMethod::kAddTenant, [&] { return store_->add_tenant(tenant); });
  }
  Result<std::vector<TenantRecord>> list_tenants() override {
    return call(StoreMethod::kListTenants, [&] { return store_->list_tenants(); });
  }
  Status open_round(const RoundRecord& round) override {
    return call(StoreMethod::kOpenRound, [&] { return store_->open_round(round); });
  }
  Result<bool> admit_update(const UpdateRecord& update) override {
    return call(StoreMethod::kAdmitUpdate, [&] { return store_->admit_update(update); });
  }
  Status withdraw_update(JobId job, RoundIndex round, ClientId client,
                         const std::string& replica) override {
    return call(StoreMethod::kWithdrawUpdate,
                [&] { return store_->withdraw_update(job, round, client, replica); });
  }
  Result<bool> has_update(JobId job, RoundIndex round, ClientId client) override {
    return call(StoreMethod::kHasUpdate, [&] { return store_->has_update(job, round, client); });
  }
  Status commit_round(const RoundRecord& round, const ModelRecord& model,
                      const nlohmann::json& policy_state) override {
    return call(StoreMethod::kCommitRound,
                [&] { return store_->commit_round(round, model, policy_state); });
  }
  Status fail_round(const RoundRecord& round) override {
    return call(StoreMethod::kFailRound, [&] { return store_->fail_round(round); });
  }
  Status add_round_metrics(JobId job, RoundIndex round, const nlohmann::json& metrics) override {
    return call(StoreMethod::kAddRoundMetrics,
                [&] { return store_->add_round_metrics(job, round, metrics); });
  }
  Result<std::vector<RoundRecord>> list_rounds(JobId job) override {
    return call(StoreMethod::kListRounds, [&] { return store_->list_rounds(job); });
  }
  Result<std::vector<UpdateRecord>> list_updates(JobId job, RoundIndex round) override {
    return call(StoreMethod::kListUpdates, [&] { return store_->list_updates(job, round); });
  }
  Status update_round_plan(JobId job, RoundIndex round, const nlohmann::json& plan,
                           Epoch epoch) override {
    return call(StoreMethod::kUpdateRoundPlan,
                [&] { return store_->update_round_plan(job, round, plan, epoch); });
  }
  Result<ModelRecord> get_model(JobId job, uint64_t version) override {
    return call(StoreMethod::kGetModel, [&] { return store_->get_model(job, version); });
  }
  Result<ModelRecord> latest_model(JobId job) override {
    return call(StoreMethod::kLatestModel, [&] { return store_->latest_model(job); });
  }
  Status close_admission(JobId job, RoundIndex round, Epoch epoch) override {
    return call(StoreMethod::kCloseAdmission,
                [&] { return store_->close_admission(job, round, epoch); });
  }
  Result<AdmissionRecord> round_admission(JobId job, RoundIndex round) override {
    return call(StoreMethod::kRoundAdmission, [&] { return store_->round_admission(job, round); });
  }
  Status put_partial(const PartialRecord& partial) override {
    return call(StoreMethod::kPutPartial, [&] { return store_->put_partial(partial); });
  }
  Result<std::vector<PartialRecord>> list_partials(JobId job, RoundIndex round) override {
    return call(StoreMethod::kListPartials, [&] { return store_->list_partials(job, round); });
  }
  Status put_stage_messages(const std::vector<StageMessage>& messages) override {
    return call(StoreMethod::kPutStageMessages,
                [&] { return store_->put_stage_messages(messages); });
  }
  Result<std::vector<StageMessage>> list_stage_messages(JobId job, RoundIndex round,
                                                        const std::string& kind) override {
    return call(StoreMethod::kListStageMessages,
                [&] { return store_->list_stage_messages(job, round, kind); });
  }
  Status put_used_keys(JobId job, RoundIndex round, const std::set<std::string>& keys,
                       uint64_t keep_rounds) override {
    return call(StoreMethod::kPutUsedKeys,
                [&] { return store_->put_used_keys(job, round, keys, keep_rounds); });
  }
  Result<std::set<std::string>> list_used_keys(JobId job) override {
    return call(StoreMethod::kListUsedKeys, [&] { return store_->list_used_keys(job); });
  }
  Result<UploadRecord> open_upload(const UploadRecord& upload) override {
    return call(StoreMethod::kOpenUpload, [&] { return store_->open_upload(upload); });
  }
  Result<UploadRecord> get_upload(JobId job, RoundIndex round, const std::string& id) override {
    return call(StoreMethod::kGetUpload, [&] { return store_->get_upload(job, round, id); });
  }
  Status put_upload_chunk(JobId job, RoundIndex round, const std::string& id, uint64_t index,
                          std::string_view bytes, double seconds) override {
    return call(StoreMethod::kPutUploadChunk,
                [&] { return store_->put_upload_chunk(job, round, id, index, bytes, seconds); });
  }
  Result<std::string> get_upload_chunk(JobId job, RoundIndex round, const std::string& id,
                                       uint64_t index) override {
    return call(StoreMethod::kGetUploadChunk,
                [&] { return store_->get_upload_chunk(job, round, id, index); });
  }
  Status drop_upload(JobId job, RoundIndex round, const std::string& id) override {
    return call(StoreMethod::kDropUpload, [&] { return store_->drop_upload(job, round, id); });
  }
  Result<LeaseRecord> acquire_lease(JobId job, const std::string& holder,
                                    double duration_s) override {
    return call(StoreMethod::kAcquireLease,
                [&] { return store_->acquire_lease(job, holder, duration_s); });
  }
  Result<LeaseRecord> renew_lease(JobId job, const std::string& holder, Epoch epoch,
                                  double duration_s) override {
    return call(StoreMethod::kRenewLease,
                [&] { return store_->renew_lease(job, holder, epoch, duration_s); });
  }
  Status release_lease(JobId job, const std::string& holder, Epoch epoch) override {
    return call(StoreMethod::kReleaseLease,
                [&] { return store_->release_lease(job, holder, epoch); });
  }
  Result<std::vector<LeaseRecord>> list_leases() override {
    return call(StoreMethod::kListLeases, [&] { return store_->list_leases(); });
  }
  Result<TenantService> charge_tenant(const ServiceCharge& charge) override {
    return call(StoreMethod::kChargeTenant, [&] { return store_->charge_tenant(charge); });
  }
  Result<std::vector<TenantService>> list_tenant_service() override {
    return call(StoreMethod::kListTenantService, [&] { return store_->list_tenant_service(); });
  }
  Status notify(Channel channel, uint64_t id) override {
    return call(StoreMethod::kNotify, [&] { return store_->notify(channel, id); });
  }
  Result<std::unique_ptr<Listener>> listen() override {
    return call(StoreMethod::kListen, [&] { return store_->listen(); });
  }
  Status ping() override {
    return call(StoreMethod::kPing, [&] { return store_->ping(); });
  }

 private:
  // The armed failure of `method`, or what `forward` returns.
  template <class Forward>
  auto call(StoreMethod method, Forward forward) -> decltype(forward()) {
    const StoreFaults::Outcome armed = faults_->on_call(method);
    if (armed.delay_s > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(armed.delay_s));
    }
    if (!armed.status.ok() && armed.when == Fault::kBefore) return armed.status;
    auto result = forward();
    if (!armed.status.ok()) return armed.status;
    return result;
  }

  const std::unique_ptr<Store> store_;
  const std::shared_ptr<StoreFaults> faults_;
};

}  // namespace

const char* method_name(StoreMethod method) {
  switch (method) {
    case StoreMethod::kAddClient:
      return "add_client";
    case StoreMethod::kGetClient:
      return "get_client";
    case StoreMethod::kFindClient:
      return "find_client";
    case StoreMethod::kListClients:
      return "list_clients";
    case StoreMethod::kUpdateClients:
      return "update_clients";
    case StoreMethod::kContactsAfter:
      return "contacts_after";
    case StoreMethod::kCreateJob:
      return "create_job";
    case StoreMethod::kGetJobModule:
      return "get_job_module";
    case StoreMethod::kGetJob:
      return "get_job";
    case StoreMethod::kListJobs:
      return "list_jobs";
    case StoreMethod::kSetJobState:
      return "set_job_state";
    case StoreMethod::kAddTenant:
      return "add_tenant";
    case StoreMethod::kListTenants:
      return "list_tenants";
    case StoreMethod::kOpenRound:
      return "open_round";
    case StoreMethod::kAdmitUpdate:
      return "admit_update";
    case StoreMethod::kWithdrawUpdate:
      return "withdraw_update";
    case StoreMethod::kHasUpdate:
      return "has_update";
    case StoreMethod::kCommitRound:
      return "commit_round";
    case StoreMethod::kFailRound:
      return "fail_round";
    case StoreMethod::kAddRoundMetrics:
      return "add_round_metrics";
    case StoreMethod::kListRounds:
      return "list_rounds";
    case StoreMethod::kListUpdates:
      return "list_updates";
    case StoreMethod::kUpdateRoundPlan:
      return "update_round_plan";
    case StoreMethod::kGetModel:
      return "get_model";
    case StoreMethod::kLatestModel:
      return "latest_model";
    case StoreMethod::kCloseAdmission:
      return "close_admission";
    case StoreMethod::kRoundAdmission:
      return "round_admission";
    case StoreMethod::kPutPartial:
      return "put_partial";
    case StoreMethod::kListPartials:
      return "list_partials";
    case StoreMethod::kPutStageMessages:
      return "put_stage_messages";
    case StoreMethod::kListStageMessages:
      return "list_stage_messages";
    case StoreMethod::kPutUsedKeys:
      return "put_used_keys";
    case StoreMethod::kListUsedKeys:
      return "list_used_keys";
    case StoreMethod::kOpenUpload:
      return "open_upload";
    case StoreMethod::kGetUpload:
      return "get_upload";
    case StoreMethod::kPutUploadChunk:
      return "put_upload_chunk";
    case StoreMethod::kGetUploadChunk:
      return "get_upload_chunk";
    case StoreMethod::kDropUpload:
      return "drop_upload";
    case StoreMethod::kAcquireLease:
      return "acquire_lease";
    case StoreMethod::kRenewLease:
      return "renew_lease";
    case StoreMethod::kReleaseLease:
      return "release_lease";
    case StoreMethod::kListLeases:
      return "list_leases";
    case StoreMethod::kChargeTenant:
      return "charge_tenant";
    case StoreMethod::kListTenantService:
      return "list_tenant_service";
    case StoreMethod::kNotify:
      return "notify";
    case StoreMethod::kListen:
      return "listen";
    case StoreMethod::kPing:
      return "ping";
  }
  return "unknown";
}

void StoreFaults::fail(StoreMethod method, Status status, size_t times, Fault when) {
  if (status.ok()) status = internal_error("StoreFaults::fail armed with an OK status");
  std::lock_guard<std::mutex> lock(mu_);
  Armed& a = methods_[static_cast<size_t>(method)];
  a.status = std::move(status);
  a.when = when;
  a.remaining = times;
  a.armed = true;
}

void StoreFaults::delay(StoreMethod method, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  methods_[static_cast<size_t>(method)].delay_s = seconds;
}

void StoreFaults::clear(StoreMethod method) {
  std::lock_guard<std::mutex> lock(mu_);
  Armed& a = methods_[static_cast<size_t>(method)];
  a.armed = false;
  a.delay_s = 0;
}

void StoreFaults::clear_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Armed& a : methods_) {
    a.armed = false;
    a.delay_s = 0;
  }
}

size_t StoreFaults::calls(StoreMethod method) const {
  std::lock_guard<std::mutex> lock(mu_);
  return methods_[static_cast<size_t>(method)].calls;
}

size_t StoreFaults::failures(StoreMethod method) const {
  std::lock_guard<std::mutex> lock(mu_);
  return methods_[static_cast<size_t>(method)].failures;
}

StoreFaults::Outcome StoreFaults::on_call(StoreMethod method) {
  std::lock_guard<std::mutex> lock(mu_);
  Armed& a = methods_[static_cast<size_t>(method)];
  ++a.calls;
  Outcome out{a.delay_s, ok_status(), a.when};
  if (!a.armed) return out;
  ++a.failures;
  if (a.remaining != kEveryCall && --a.remaining == 0) a.armed = false;
  out.status = a.status;
  return out;
}

std::unique_ptr<storage::Store> failing_store(std::unique_ptr<storage::Store> store,
                                              std::shared_ptr<StoreFaults> faults) {
  return std::make_unique<FailingStore>(std::move(store), std::move(faults));
}

}  // namespace fedcase::testing
