#include "server/api/client_query.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fedcase::server {
namespace {

constexpr size_t kMaxLimit = 1000;
constexpr size_t kHistogramBuckets = 20;

const std::map<std::string, ClientColumn>& columns() {
  static const std::map<std::string, ClientColumn> all = {
      {"client_id", ClientColumn::kId},
      {"expected_duration_s", ClientColumn::kExpectedDuration},
      {"last_seen", ClientColumn::kLastSeen},
      {"compute_ms_per_sample", ClientColumn::kComputeSpeed},
      {"download_bytes_per_s", ClientColumn::kDownloadSpeed},
      {"upload_bytes_per_s", ClientColumn::kUploadSpeed},
      {"storage_read_bytes_per_s", ClientColumn::kStorageSpeed},
      {"cache_hit_ratio", ClientColumn::kCacheHitRatio},
      {"utility", ClientColumn::kUtility},
      {"times_selected", ClientColumn::kTimesSelected},
  };
  return all;
}

std::optional<uint64_t> whole_number(const std::string& s) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoull(s);
}

double known_or_nan(const scheduling::Smoothed& s) {
  return s.known() ? s.mean : std::numeric_limits<double>::quiet_NaN();
}

// The column's value for `c`; NaN when it is unknown (sorted last either way).
double column_value(const ClientSummary& c, ClientColumn column, std::optional<JobId> job) {
  const scheduling::ClientProfile& p = c.profile;
  switch (column) {
    case ClientColumn::kId:
      return double(c.record.id);
    case ClientColumn::kExpectedDuration: {
      auto it = job ? c.expected_duration_s.find(*job) : c.expected_duration_s.end();
      return it == c.expected_duration_s.end() ? std::numeric_limits<double>::quiet_NaN()
                                               : it->second;
    }
    case ClientColumn::kLastSeen:
      return c.record.last_seen;
    case ClientColumn::kComputeSpeed:
      return known_or_nan(p.compute_ms_per_sample);
    case ClientColumn::kDownloadSpeed:
      return known_or_nan(p.download_bytes_per_s);
    case ClientColumn::kUploadSpeed:
      return known_or_nan(p.upload_bytes_per_s);
    case ClientColumn::kStorageSpeed:
      return known_or_nan(p.storage_read_bytes_per_s);
    case ClientColumn::kCacheHitRatio:
      return known_or_nan(p.cache_hit_ratio);
    case ClientColumn::kUtility:
      return p.utility_round > 0 ? p.utility : std::numeric_limits<double>::quiet_NaN();
    case ClientColumn::kTimesSelected:
      return double(p.times_selected);
  }
  return 0;
}

bool matches(const ClientSummary& c, const ClientQuery& q) {
  if (q.available && c.available != *q.available) return false;
  if (q.search.empty()) return true;
  if (std::to_string(c.record.id).find(q.search) != std::string::npos) return true;
  return c.record.info.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
             .find(q.search) != std::string::npos;
}

DurationHistogram histogram_of(const std::vector<const ClientSummary*>& clients,
                               std::optional<JobId> job) {
  DurationHistogram h;
  h.job = job;
  if (!job) return h;
  std::vector<double> values;
  for (const ClientSummary* c : clients) {
    auto it = c->expected_duration_s.find(*job);
    if (it != c->expected_duration_s.end() && std::isfinite(it->second)) {
      values.push_back(it->second);
    }
  }
  if (values.empty()) return h;
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  const double low = *lo;
  const double width = std::max((*hi - low) / kHistogramBuckets, 1e-9);
  for (size_t i = 0; i <= kHistogramBuckets; ++i) h.edges.push_back(low + i * width);
  h.counts.assign(kHistogramBuckets, 0);
  for (double v : values) {
    h.counts[std::min(kHistogramBuckets - 1, size_t((v - low) / width))] += 1;
  }
  return h;
}

}  // namespace

Result<ClientQuery> parse_client_query(const std::map<std::string, std::string>& params) {
  ClientQuery q;
  for (const auto& [key, value] : params) {
    if (key == "offset" || key == "limit" || key == "job") {
      auto n = whole_number(value);
      if (!n) return invalid_argument(key + " must be a whole number");
      if (key == "offset") q.offset = *n;
      if (key == "limit") {
        if (*n > kMaxLimit) return invalid_argument("limit must be at most 1000");
        q.limit = *n;
      }
      if (key == "job") q.job = *n;
    } else if (key == "sort") {
      auto it = columns().find(value);
      if (it == columns().end()) return invalid_argument("cannot sort by '" + value + "'");
      q.sort = it->second;
    } else if (key == "order") {
      if (value != "asc" && value != "desc") return invalid_argument("order must be asc or desc");
      q.descending = value == "desc";
    } else if (key == "available") {
      if (value != "true" && value != "false") {
        return invalid_argument("available must be true or false");
      }
      q.available = value == "true";
    } else if (key == "search") {
      if (value.size() > 200) return invalid_argument("search must be at most 200 characters");
      q.search = value;
    } else {
      return invalid_argument("unknown parameter '" + key + "'");
    }
  }
  return q;
}

ClientPage select_clients(const std::vector<ClientSummary>& clients, const ClientQuery& query) {
  ClientPage page;
  page.total = clients.size();
  std::optional<JobId> job = query.job;
  std::vector<const ClientSummary*> matched;
  for (const ClientSummary& c : clients) {
    if (!matches(c, query)) continue;
    matched.push_back(&c);
    if (!query.job && !c.expected_duration_s.empty()) {
      const JobId first = c.expected_duration_s.begin()->first;
      job = job ? std::min(*job, first) : first;
    }
  }
  page.matched = matched.size();
  page.histogram = histogram_of(matched, job);
  // Unknown values last in either order; ties by id, so pages never overlap.
  auto before = [&](const ClientSummary* a, const ClientSummary* b) {
    const double x = column_value(*a, query.sort, job), y = column_value(*b, query.sort, job);
    if (std::isnan(x) != std::isnan(y)) return std::isnan(y);
    if (!std::isnan(x) && x != y) return query.descending ? x > y : x < y;
    return a->record.id < b->record.id;
  };
  std::sort(matched.begin(), matched.end(), before);
  const size_t begin = std::min(query.offset, matched.size());
  const size_t end =
      query.limit == 0 ? matched.size() : std::min(matched.size(), begin + query.limit);
  page.clients.assign(matched.begin() + begin, matched.begin() + end);
  return page;
}

}  // namespace fedcase::server
