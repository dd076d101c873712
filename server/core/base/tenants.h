#pragma once
// The coordinator's tenants (docs/tenancy.md): teams that share the fleet, each with its own
// bearer token, a weight and limits, and the fair share of the fleet between them
// (scheduling::FairShare in kPerTenant mode): which job's round opens first, what each
// tenant is charged, when one is throttled. Tenant 0 is the operator, whose jobs the admin
// token creates (weight 1, no limits).
//
// Thread safety: every method may be called from any thread; one internal mutex, never held
// across a store call (decide under it, write outside it, publish under it).

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/ids.h"
#include "common/mutex.h"
#include "common/status.h"
#include "scheduling/fair_share.h"
#include "storage/store.h"

namespace fedcase::server {

// The name under which tenant 0, the operator, is shown; no tenant may take it.
inline constexpr const char* kOperatorTenantName = "operator";

class TenantRegistry {
 public:
  // `store` must outlive the registry.
  explicit TenantRegistry(storage::Store& store);

  // Loads every stored tenant. kInternal / kInvalidArgument for unreadable rows.
  [[nodiscard]] Status load();
  // Installs the stored tenants it does not know yet (added through another replica sharing
  // the database); those it knows keep their throttling windows. Errors as load()'s, but a
  // tenant with unreadable limits is skipped.
  [[nodiscard]] Status refresh();

  // `request`: {"name", "weight" (0 < w <= 100, default 1), "limits": {"max_running_jobs",
  // "max_submissions", "submission_window_s", "max_round_starts", "round_window_s"}} (limits
  // apply only under overload; 0 or absent: none). Returns the tenant and its token (shown only
  // here). kInvalidArgument naming a bad field, kConflict for a name already used.
  struct Created {
    storage::TenantRecord record;
    std::string token;
  };
  [[nodiscard]] Result<Created> create(const nlohmann::json& request, double now);

  // The tenant whose token hashes to `token_hash`, if any.
  std::optional<TenantId> identify(const std::string& token_hash) const;
  std::vector<storage::TenantRecord> list() const;
  // The share of the fleet: FairShare::to_json.
  nlohmann::json share_json() const;

  // ---- the fair share (scheduling::FairShare) ----
  bool admit_job(TenantId tenant, size_t running_jobs, bool overload, double now,
                 double& retry_after_s);
  void set_active_tenants(const std::set<TenantId>& active);
  std::optional<size_t> next_round(const std::vector<scheduling::WaitingJob>& waiting,
                                   bool overload, double now);
  void round_opened(TenantId tenant, JobId job, double now, double expected_client_s,
                    double class_cost);
  void slots_opened(TenantId tenant, JobId job, double expected_client_s, double class_cost);
  void round_concluded(TenantId tenant, JobId job, double expected_client_s, double client_s,
                       double class_cost);
  std::optional<double> throttle_ends(double now) const;

 private:
  void install(const storage::TenantRecord& record) FEDCASE_REQUIRES(mu_);

  storage::Store& store_;
  mutable Mutex mu_;
  std::map<TenantId, storage::TenantRecord> tenants_ FEDCASE_GUARDED_BY(mu_);
  std::unordered_map<std::string, TenantId> token_hashes_ FEDCASE_GUARDED_BY(mu_);
  scheduling::FairShare share_ FEDCASE_GUARDED_BY(mu_);
};

}  // namespace fedcase::server
