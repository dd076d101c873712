#pragma once
// Which clients a fleet listing shows (GET /v1/admin/clients?...): filtered, sorted and cut
// into pages on the coordinator, so a dashboard over 10,000 clients moves one page at a time,
// plus a histogram of the matching clients' expected task durations. Pure functions.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/status.h"
#include "server/core/coordinator.h"

namespace fedcase::server {

// The columns a listing sorts by (docs/protocol.md).
enum class ClientColumn {
  kId,
  kExpectedDuration,  // for `job` (clients without one sort last)
  kLastSeen,
  kComputeSpeed,  // ms per sample
  kDownloadSpeed,
  kUploadSpeed,
  kStorageSpeed,
  kCacheHitRatio,
  kUtility,
  kTimesSelected,
};

struct ClientQuery {
  size_t offset = 0;
  size_t limit = 0;  // 0: every matching client
  ClientColumn sort = ClientColumn::kId;
  bool descending = false;
  // The job whose expected durations are sorted by and binned; when unset, the lowest job id
  // that any matched client has an expected duration for.
  std::optional<JobId> job;
  std::optional<bool> available;  // only available (or only unavailable) clients
  std::string search;             // substring of the client id or its device info (as JSON)
};

// Reads offset, limit (at most 1000), sort, order (asc|desc), job, available (true|false) and
// search from decoded query parameters. kInvalidArgument naming the parameter otherwise.
Result<ClientQuery> parse_client_query(const std::map<std::string, std::string>& params);

struct DurationHistogram {
  std::optional<JobId> job;   // unset: no client has an expected duration
  std::vector<double> edges;  // bucket bounds, ascending: counts.size() + 1 of them
  std::vector<size_t> counts;
};

struct ClientPage {
  std::vector<const ClientSummary*> clients;  // into the listing given to select_clients
  size_t total = 0;                           // clients in the listing
  size_t matched = 0;                         // clients passing the filters
  DurationHistogram histogram;                // over the matched clients
};

// `clients` must outlive the page.
ClientPage select_clients(const std::vector<ClientSummary>& clients, const ClientQuery& query);

}  // namespace fedcase::server
