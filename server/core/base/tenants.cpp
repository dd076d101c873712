#include "server/core/base/tenants.h"

#include <algorithm>

#include "common/crypto.h"
#include "common/json_read.h"

namespace fedcase::server {

using nlohmann::json;

namespace {

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

}  // namespace

TenantRegistry::TenantRegistry(storage::Store& store) : store_(store) {
  share_.set_tenant(0, 1, {});  // the operator
}

void TenantRegistry::install(const storage::TenantRecord& record) {
  auto limits = scheduling::parse_tenant_limits(record.limits);
  share_.set_tenant(record.id, record.weight, limits.ok() ? *limits : scheduling::TenantLimits{});
  token_hashes_[record.token_hash] = record.id;
  tenants_[record.id] = record;
}

Status TenantRegistry::load() {
  auto records = store_.list_tenants();
  if (!records.ok()) return records.status();
  MutexLock lock(mu_);
  for (const auto& record : *records) {
    if (!scheduling::parse_tenant_limits(record.limits).ok()) {
      return invalid_argument("tenant " + std::to_string(record.id) + " has unreadable limits");
    }
    install(record);
  }
  return ok_status();
}

Status TenantRegistry::refresh() {
  auto records = store_.list_tenants();
  if (!records.ok()) return records.status();
  MutexLock lock(mu_);
  for (const auto& record : *records) {
    if (tenants_.count(record.id) || !scheduling::parse_tenant_limits(record.limits).ok()) continue;
    install(record);
  }
  return ok_status();
}

Result<TenantRegistry::Created> TenantRegistry::create(const json& request, double now) {
  if (!request.is_object()) return invalid_argument("request body must be a JSON object");
  storage::TenantRecord record;
  json limits = json::object();
  ObjectReader r(request, "tenant");
  r.require("name").text("name", record.name).number("weight", record.weight, 1e-3, 100);
  if (const json* l = r.member("limits")) {
    auto parsed = scheduling::parse_tenant_limits(*l);
    r.merge(parsed.status());
    if (parsed.ok()) limits = scheduling::tenant_limits_json(*parsed);
  }
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  if (!valid_name(record.name)) {
    return invalid_argument("tenant.name must be 1 to 64 of a-z, 0-9, '-' and '_'");
  }
  if (record.name == kOperatorTenantName) {
    return invalid_argument("tenant.name 'operator' is the coordinator's own (tenant 0)");
  }
  auto token = random_token();
  if (!token.ok()) return token.status();
  record.token_hash = sha256_hex(*token);
  record.limits = limits.empty() ? scheduling::tenant_limits_json({}) : limits;
  record.created_at = now;
  auto id = store_.add_tenant(record);
  if (!id.ok()) {
    if (id.status().code() == Code::kConflict) {
      return conflict("a tenant named '" + record.name + "' exists");
    }
    return id.status();
  }
  record.id = *id;
  MutexLock lock(mu_);
  install(record);
  return Created{record, *token};
}

std::optional<TenantId> TenantRegistry::identify(const std::string& token_hash) const {
  MutexLock lock(mu_);
  auto it = token_hashes_.find(token_hash);
  if (it == token_hashes_.end()) return std::nullopt;
  return it->second;
}

std::vector<storage::TenantRecord> TenantRegistry::list() const {
  MutexLock lock(mu_);
  std::vector<storage::TenantRecord> out;
  for (const auto& [id, record] : tenants_) out.push_back(record);
  return out;
}

json TenantRegistry::share_json() const {
  MutexLock lock(mu_);
  return share_.to_json();
}

bool TenantRegistry::admit_job(TenantId tenant, size_t running_jobs, bool overload, double now,
                               double& retry_after_s) {
  MutexLock lock(mu_);
  return share_.admit_job(tenant, running_jobs, overload, now, retry_after_s);
}

void TenantRegistry::set_active_tenants(const std::set<TenantId>& active) {
  MutexLock lock(mu_);
  share_.set_active_tenants(active);
}

std::optional<size_t> TenantRegistry::next_round(const std::vector<scheduling::WaitingJob>& waiting,
                                                 bool overload, double now) {
  MutexLock lock(mu_);
  return share_.next_round(waiting, overload, now);
}

void TenantRegistry::round_opened(TenantId tenant, JobId job, double now, double expected_client_s,
                                  double class_cost) {
  MutexLock lock(mu_);
  share_.round_opened(tenant, job, now, expected_client_s, class_cost);
}

void TenantRegistry::slots_opened(TenantId tenant, JobId job, double expected_client_s,
                                  double class_cost) {
  MutexLock lock(mu_);
  share_.slots_opened(tenant, job, expected_client_s, class_cost);
}

void TenantRegistry::round_concluded(TenantId tenant, JobId job, double expected_client_s,
                                     double client_s, double class_cost) {
  MutexLock lock(mu_);
  share_.round_concluded(tenant, job, expected_client_s, client_s, class_cost);
}

std::optional<double> TenantRegistry::throttle_ends(double now) const {
  MutexLock lock(mu_);
  return share_.throttle_ends(now);
}

}  // namespace fedcase::server
