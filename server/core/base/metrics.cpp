#include "server/core/base/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace fedcase::server {
namespace {

enum Kind { kCounter, kGauge, kHistogram };

struct Declaration {
  const char* name;
  Kind kind;
  const char* help;
  std::vector<double> buckets;  // histograms: upper bounds, ascending (+Inf is implied)
};

const std::vector<double> kFastBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                          0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
const std::vector<double> kFoldBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                          0.1,    0.25,  0.5,    1,     2.5,  5,     10};
const std::vector<double> kStalenessBuckets = {0, 1, 2, 3, 5, 10, 20, 50, 100};
const std::vector<double> kRoundBuckets = {1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600};

// Every family the coordinator exports, in the order /metrics shows them.
const std::vector<Declaration>& declarations() {
  using namespace metric;
  static const std::vector<Declaration> all = {
      {kHttpRequests, kCounter, "HTTP requests answered, by route template and status code.", {}},
      {kHttpReceivedBytes,
       kCounter,
       "Bytes of HTTP requests read, headers and bodies (TLS framing not counted).",
       {}},
      {kHttpSentBytes,
       kCounter,
       "Bytes of HTTP responses written, headers and bodies (TLS framing not counted).",
       {}},
      {kHttpOpenConnections, kGauge, "Open client connections.", {}},
      {kLongPollsWaiting, kGauge, "Task long polls waiting for a task.", {}},
      {kCheckIns,
       kCounter,
       "Task polls answered, by answer: a task, or later (told when to check in again).",
       {}},
      {kCheckInPeriod,
       kGauge,
       "The mean period between check-ins pace steering gave the latest device without a task.",
       {}},
      {kUpdatesAccepted, kCounter, "Model updates accepted into a round.", {}},
      {kUpdatesRefused, kCounter, "Model updates refused, by reason (the error code).", {}},
      {kFoldSeconds, kHistogram, "Time to fold one accepted update into its round's aggregate.",
       kFoldBuckets},
      {kUpdateStaleness, kHistogram,
       "Versions an asynchronous job's accepted update trained behind the model it joins.",
       kStalenessBuckets},
      {kSelectionSeconds, kHistogram,
       "Time to open a round: select the participants and plan their tasks.", kFastBuckets},
      {kRounds, kCounter, "Rounds concluded, by job and outcome (committed or failed).", {}},
      {kRoundSeconds, kHistogram, "Round duration from opening to conclusion, by outcome.",
       kRoundBuckets},
      {kStoreWriteSeconds, kHistogram, "Latency of store writes, by operation.", kFastBuckets},
      {kClientsRegistered, kGauge, "Registered clients.", {}},
      {kClientsConnected, kGauge, "Clients seen recently enough to be selected.", {}},
      {kClientRowsRead,
       kCounter,
       "Client rows read from the store: all at start, then those that changed (replicas).",
       {}},
      {kJobs, kGauge, "Jobs, by state.", {}},
      {kJobTestAccuracy, kGauge, "Test accuracy of a job's newest evaluated model.", {}},
      {kJobPrivacyEpsilon, kGauge, "Privacy spent (epsilon) by a job with central DP.", {}},
      {kSecAggRounds,
       kCounter,
       "Secure rounds concluded, by outcome (committed, or failed) and the stage they ended in.",
       {}},
      {kSecAggStageSeconds, kHistogram,
       "Duration of each stage of a secure round (unmasking: the coordinator's removal of the "
       "masks).",
       kFoldBuckets},
      {kSecAggDropouts,
       kCounter,
       "Clients of a secure round that did not answer a stage they were in, by stage.",
       {}},
      {kSecAggMessagesRefused,
       kCounter,
       "Secure-aggregation messages refused, by stage and reason (the error code).",
       {}},
      {kLeaseChanges,
       kCounter,
       "Job leases this replica acquired, lost or stepped down from, by change.",
       {}},
      {kJobsOwned, kGauge, "Jobs whose rounds this replica drives (all of them alone).", {}},
      {kPartials,
       kCounter,
       "Partial aggregates of shared rounds this replica wrote, or merged as their owner, by "
       "direction.",
       {}},
      {kPartialBytes,
       kCounter,
       "Bytes of the partial aggregates this replica wrote, or read and merged as the owner, by "
       "direction.",
       {}},
      {kPartialUpdatesLost,
       kCounter,
       "Admitted updates of shared rounds this replica owned that were left out: their "
       "replica wrote no partial in time.",
       {}},
  };
  return all;
}

std::string escape_label(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// {a="1",b="2"}, with `extra` (a histogram's le) last; empty when there are no labels.
std::string label_text(const Labels& labels, const std::string& extra = std::string()) {
  if (labels.empty() && extra.empty()) return std::string();
  std::string out = "{";
  for (const auto& [name, value] : labels) {
    if (out.size() > 1) out += ',';
    out += name + "=\"" + escape_label(value) + "\"";
  }
  if (!extra.empty()) {
    if (out.size() > 1) out += ',';
    out += extra;
  }
  return out + "}";
}

// The shortest of 15 or 17 significant digits that reads back as `v`.
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char text[32];
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    std::snprintf(text, sizeof(text), "%.0f", v);
    return text;
  }
  std::snprintf(text, sizeof(text), "%.15g", v);
  if (std::strtod(text, nullptr) != v) std::snprintf(text, sizeof(text), "%.17g", v);
  return text;
}

}  // namespace

struct Metrics::Family {
  struct Series {
    double value = 0;                 // counters and gauges
    std::vector<uint64_t> in_bucket;  // histograms: observations <= each bound (not cumulative)
    uint64_t count = 0;
    double sum = 0;
  };
  const Declaration& declaration;
  std::map<Labels, Series> series;
};

Metrics::Metrics() {
  for (const Declaration& d : declarations()) {
    families_.push_back(std::unique_ptr<Family>(new Family{d, {}}));
  }
}

Metrics::~Metrics() = default;

Metrics::Family* Metrics::find(std::string_view family, int kind) {
  for (auto& f : families_) {
    if (f->declaration.name == family) return f->declaration.kind == kind ? f.get() : nullptr;
  }
  return nullptr;
}

void Metrics::add(std::string_view family, const Labels& labels, double delta) {
  MutexLock lock(mu_);
  if (Family* f = find(family, kCounter); f && delta >= 0) f->series[labels].value += delta;
}

void Metrics::set(std::string_view family, const Labels& labels, double value) {
  MutexLock lock(mu_);
  if (Family* f = find(family, kGauge)) f->series[labels].value = value;
}

void Metrics::set_count(std::string_view family, const Labels& labels, double count) {
  MutexLock lock(mu_);
  if (Family* f = find(family, kCounter)) {
    double& value = f->series[labels].value;
    value = std::max(value, count);
  }
}

void Metrics::clear(std::string_view family) {
  MutexLock lock(mu_);
  if (Family* f = find(family, kGauge)) f->series.clear();
}

void Metrics::observe(std::string_view family, const Labels& labels, double value) {
  if (!std::isfinite(value)) return;
  MutexLock lock(mu_);
  Family* f = find(family, kHistogram);
  if (!f) return;
  Family::Series& s = f->series[labels];
  const std::vector<double>& bounds = f->declaration.buckets;
  s.in_bucket.resize(bounds.size());
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (value <= bounds[i]) {
      ++s.in_bucket[i];
      break;
    }
  }
  ++s.count;
  s.sum += value;
}

Metrics::Registration::~Registration() {
  MutexLock lock(metrics_.collectors_mu_);
  metrics_.collectors_.erase(place_);
}

std::unique_ptr<Metrics::Registration> Metrics::add_collector(Collector collector) {
  MutexLock lock(collectors_mu_);
  auto place = collectors_.insert(collectors_.end(), std::move(collector));
  return std::unique_ptr<Registration>(new Registration(*this, place));
}

std::string Metrics::render() {
  // Held until the text is formatted: another scrape's collectors cannot clear a gauge
  // between this scrape's collection and its formatting.
  MutexLock collecting(collectors_mu_);
  for (Collector& collect : collectors_) collect(*this);
  static const char* kTypeNames[] = {"counter", "gauge", "histogram"};
  MutexLock lock(mu_);
  std::string out;
  for (const auto& f : families_) {
    const Declaration& d = f->declaration;
    const std::string name = d.name;
    out += "# HELP " + name + " " + d.help + "\n";
    out += "# TYPE " + name + " " + kTypeNames[d.kind] + "\n";
    for (const auto& [labels, s] : f->series) {
      if (d.kind != kHistogram) {
        out += name + label_text(labels) + " " + number(s.value) + "\n";
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < d.buckets.size(); ++i) {
        cumulative += i < s.in_bucket.size() ? s.in_bucket[i] : 0;
        out += name + "_bucket" + label_text(labels, "le=\"" + number(d.buckets[i]) + "\"") + " " +
               number(double(cumulative)) + "\n";
      }
      out += name + "_bucket" + label_text(labels, "le=\"+Inf\"") + " " + number(double(s.count)) +
             "\n";
      out += name + "_sum" + label_text(labels) + " " + number(s.sum) + "\n";
      out += name + "_count" + label_text(labels) + " " + number(double(s.count)) + "\n";
    }
  }
  return out;
}

double Metrics::value(std::string_view family, const Labels& labels) const {
  MutexLock lock(mu_);
  for (const auto& f : families_) {
    if (f->declaration.name != family) continue;
    auto it = f->series.find(labels);
    return it == f->series.end()               ? 0
           : f->declaration.kind == kHistogram ? double(it->second.count)
                                               : it->second.value;
  }
  return 0;
}

}  // namespace fedcase::server
