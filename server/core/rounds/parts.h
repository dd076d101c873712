#pragma once
// The pieces of a coordinator's state that its start (recovery.h) and a replica's ownership
// (replica/ownership.h) load jobs into and drive; each must outlive whoever holds the parts.

#include "server/core/base/client_registry.h"
#include "server/core/base/config.h"
#include "server/core/base/metrics.h"
#include "server/core/base/tenants.h"
#include "server/core/jobs/job_table.h"
#include "server/core/rounds/round_driver.h"
#include "storage/store.h"

namespace fedcase::server {

struct CoordinatorParts {
  const CoordinatorConfig& config;
  storage::Store& store;
  ClientRegistry& clients;
  TenantRegistry& tenants;
  JobTable& jobs;
  RoundDriver& driver;  // evaluates committed models left unevaluated
  Metrics& metrics;     // round counters start from the stored rounds
  const Clock& clock;
};

}  // namespace fedcase::server
