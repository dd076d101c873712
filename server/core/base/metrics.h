#pragma once
// The coordinator's operational metrics, rendered in Prometheus' text exposition format
// (version 0.0.4) for GET /metrics. Every family is declared once, in metrics.cpp, with its
// type and help text (docs/operations.md lists them); label values come from bounded sets
// (job ids, route templates, status codes, refusal reasons), never from client ids.
//
// Counters and histograms are recorded where things happen (the HTTP front end, the API, the
// round driver, the store); gauges are set at scrape time by collectors, which their owners
// register and remove.
//
// Thread safety: every method may be called from any thread. Recording takes one mutex for a
// map update; render() holds the collectors' mutex while it runs the collectors and formats
// (so concurrent scrapes do not interleave), taking the recording mutex only to record and
// format. Lock order: collectors' mutex, then whatever a collector takes, then the recording
// mutex; never the other way.
// Errors: recording into an undeclared family, or with the wrong kind, is a programming error
// and is ignored (the family does not appear).

#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace fedcase::server {

// Label name and value pairs, in the order they are rendered.
using Labels = std::vector<std::pair<std::string, std::string>>;

// Family names (metrics.cpp declares their kind, help text and buckets).
namespace metric {
inline constexpr const char* kHttpRequests = "fedcase_http_requests_total";
inline constexpr const char* kHttpReceivedBytes = "fedcase_http_received_bytes_total";
inline constexpr const char* kHttpSentBytes = "fedcase_http_sent_bytes_total";
inline constexpr const char* kHttpOpenConnections = "fedcase_http_open_connections";
inline constexpr const char* kLongPollsWaiting = "fedcase_long_polls_waiting";
inline constexpr const char* kCheckIns = "fedcase_check_ins_total";
inline constexpr const char* kCheckInPeriod = "fedcase_check_in_period_seconds";
inline constexpr const char* kClientRowsRead = "fedcase_client_rows_read_total";
inline constexpr const char* kUpdatesAccepted = "fedcase_updates_accepted_total";
inline constexpr const char* kUpdatesRefused = "fedcase_updates_refused_total";
inline constexpr const char* kFoldSeconds = "fedcase_aggregation_fold_seconds";
inline constexpr const char* kUpdateStaleness = "fedcase_update_staleness";
inline constexpr const char* kSelectionSeconds = "fedcase_selection_seconds";
inline constexpr const char* kRounds = "fedcase_rounds_total";
inline constexpr const char* kRoundSeconds = "fedcase_round_duration_seconds";
inline constexpr const char* kStoreWriteSeconds = "fedcase_store_write_seconds";
inline constexpr const char* kClientsRegistered = "fedcase_clients_registered";
inline constexpr const char* kClientsConnected = "fedcase_clients_connected";
inline constexpr const char* kJobs = "fedcase_jobs";
inline constexpr const char* kJobTestAccuracy = "fedcase_job_test_accuracy";
inline constexpr const char* kJobPrivacyEpsilon = "fedcase_job_privacy_epsilon";
inline constexpr const char* kSecAggRounds = "fedcase_secagg_rounds_total";
inline constexpr const char* kSecAggStageSeconds = "fedcase_secagg_stage_seconds";
inline constexpr const char* kSecAggDropouts = "fedcase_secagg_dropouts_total";
inline constexpr const char* kSecAggMessagesRefused = "fedcase_secagg_messages_refused_total";
inline constexpr const char* kLeaseChanges = "fedcase_lease_changes_total";
inline constexpr const char* kJobsOwned = "fedcase_jobs_owned";
inline constexpr const char* kPartials = "fedcase_partials_total";
inline constexpr const char* kPartialBytes = "fedcase_partial_bytes_total";
inline constexpr const char* kPartialUpdatesLost = "fedcase_partial_updates_lost_total";
}  // namespace metric

class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Counters: adds `delta` (>= 0).
  void add(std::string_view family, const Labels& labels, double delta = 1);
  // Gauges: sets the series' value.
  void set(std::string_view family, const Labels& labels, double value);
  // Counters counted elsewhere (a collector copies their count): raises the series to
  // `count`; a lower count is ignored, so a counter never goes down.
  void set_count(std::string_view family, const Labels& labels, double count);
  // Gauges: removes every series of the family (a collector does this before setting the
  // current ones, so that a series that went away is not reported forever).
  void clear(std::string_view family);
  // Histograms: counts one observation.
  void observe(std::string_view family, const Labels& labels, double value);

  // A collector sets gauges just before each render. The returned handle removes it when
  // destroyed; it must not outlive this Metrics.
  using Collector = std::function<void(Metrics&)>;
  class Registration {
   public:
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    friend class Metrics;
    Registration(Metrics& metrics, std::list<Collector>::iterator place)
        : metrics_(metrics), place_(place) {}
    Metrics& metrics_;
    std::list<Collector>::iterator place_;
  };
  [[nodiscard]] std::unique_ptr<Registration> add_collector(Collector collector);

  // The exposition text of every family, in declaration order. Series of a family are
  // sorted by their labels, so the output is stable.
  std::string render();

  // A counter's or gauge's value, or a histogram's number of observations (0 when the series
  // does not exist), for tests.
  double value(std::string_view family, const Labels& labels) const;

 private:
  struct Family;
  Family* find(std::string_view family, int kind) FEDCASE_REQUIRES(mu_);

  Mutex collectors_mu_;  // taken before mu_, never inside it
  std::list<Collector> collectors_ FEDCASE_GUARDED_BY(collectors_mu_);
  mutable Mutex mu_ FEDCASE_ACQUIRED_AFTER(collectors_mu_);
  std::vector<std::unique_ptr<Family>> families_ FEDCASE_GUARDED_BY(mu_);  // declaration order
};

}  // namespace fedcase::server
