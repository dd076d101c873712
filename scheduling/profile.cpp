#include "scheduling/profile.h"

#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>

#include "common/json_read.h"

namespace fedcase::scheduling {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Status check_measurements(std::initializer_list<double> values, const char* what) {
  for (double v : values) {
    if (!(v >= 0) || !std::isfinite(v)) {
      return invalid_argument(std::string(what) + " values must be finite and non-negative");
    }
  }
  return ok_status();
}

void fold_positive(Smoothed& estimate, double x, double alpha) {
  if (x > 0) estimate.fold(x, alpha);
}

nlohmann::json smoothed_to_json(const Smoothed& s) {
  return {{"mean", s.mean}, {"count", s.count}};
}

Status smoothed_from_json(ObjectReader& parent, const char* key, Smoothed& out) {
  const nlohmann::json* member = parent.member(key);
  if (member == nullptr) return ok_status();
  ObjectReader r(*member, parent.path(key));
  Smoothed s;
  r.number("mean", s.mean, 0, kInf).integer("count", s.count);
  FEDCASE_RETURN_IF_ERROR(r.status());
  out = s;
  return ok_status();
}

Status availability_from_json(ObjectReader& parent, Availability& out) {
  const nlohmann::json* member = parent.member("availability");
  if (member == nullptr) return ok_status();
  ObjectReader r(*member, parent.path("availability"));
  Availability a;
  r.number("last_seen_s", a.last_seen_s, 0, kInf)
      .number("online_since_s", a.online_since_s, 0, kInf)
      .merge(smoothed_from_json(r, "session_s", a.session_s))
      .merge(smoothed_from_json(r, "offline_s", a.offline_s))
      .number("steered_back_by_s", a.steered_back_by_s, 0, kInf);
  FEDCASE_RETURN_IF_ERROR(r.status());
  out = a;
  return ok_status();
}

}  // namespace

void Smoothed::fold(double x, double alpha) {
  mean = known() ? mean + alpha * (x - mean) : x;
  if (count < std::numeric_limits<uint32_t>::max()) ++count;
}

double statistical_utility(uint64_t unique_samples, uint64_t samples, double loss_sq_sum) {
  if (samples == 0) return 0;
  return static_cast<double>(unique_samples) *
         std::sqrt(loss_sq_sum / static_cast<double>(samples));
}

uint64_t unique_samples(uint64_t samples, uint64_t dataset_size) {
  return dataset_size > 0 ? std::min(samples, dataset_size) : samples;
}

Status observe_registration(ClientProfile& profile, const DeviceReport& report,
                            const ProfileParams& params) {
  FEDCASE_RETURN_IF_ERROR(check_measurements(
      {report.sample_bytes, report.compute_ms_per_sample, report.storage_read_bytes_per_s},
      "device report"));
  profile.dataset_size = report.dataset_size;
  profile.cache_capacity_bytes = report.cache_capacity_bytes;
  fold_positive(profile.sample_bytes, report.sample_bytes, params.alpha);
  fold_positive(profile.compute_ms_per_sample, report.compute_ms_per_sample, params.alpha);
  fold_positive(profile.storage_read_bytes_per_s, report.storage_read_bytes_per_s, params.alpha);
  return ok_status();
}

void observe_heartbeat(ClientProfile& profile, double now_s, const ProfileParams& params) {
  Availability& a = profile.availability;
  if (!(now_s > 0) || now_s < a.last_seen_s) return;
  const bool steered_back =
      a.steered_back_by_s > 0 && now_s <= a.steered_back_by_s + params.offline_gap_s;
  a.steered_back_by_s = 0;
  if (a.last_seen_s == 0) {
    a.online_since_s = now_s;
  } else if (now_s - a.last_seen_s > params.offline_gap_s && !steered_back) {
    a.session_s.fold(a.last_seen_s - a.online_since_s, params.alpha);
    a.offline_s.fold(now_s - a.last_seen_s, params.alpha);
    a.online_since_s = now_s;
  }
  a.last_seen_s = now_s;
}

void observe_steered(ClientProfile& profile, double now_s, double back_by_s,
                     const ProfileParams& params) {
  observe_heartbeat(profile, now_s, params);
  if (back_by_s > now_s) profile.availability.steered_back_by_s = back_by_s;
}

bool is_online(const ClientProfile& profile, double now_s, const ProfileParams& params) {
  const Availability& a = profile.availability;
  return a.last_seen_s > 0 && now_s - a.last_seen_s <= params.offline_gap_s &&
         a.steered_back_by_s == 0;
}

double survival_probability(const ClientProfile& profile, double duration_s) {
  const Smoothed& session = profile.availability.session_s;
  if (!(duration_s > 0) || !session.known()) return 1;
  if (!(session.mean > 0)) return 0;
  return std::exp(-duration_s / session.mean);
}

void observe_selected(ClientProfile& profile, RoundIndex round) {
  profile.last_selected_round = round;
  ++profile.times_selected;
}

Status observe_completion(ClientProfile& profile, const RoundReport& r,
                          const ProfileParams& params) {
  if (r.samples == 0) return invalid_argument("round report: samples must be > 0");
  FEDCASE_RETURN_IF_ERROR(check_measurements(
      {r.loss_sq_sum, r.compute_s, r.io_s, r.sample_bytes, r.download_s, r.upload_s},
      "round report"));
  if (!std::isfinite(r.loss_sum)) return invalid_argument("round report: loss_sum must be finite");
  const double alpha = params.alpha;
  const double samples = static_cast<double>(r.samples);
  fold_positive(profile.compute_ms_per_sample, 1000.0 * r.compute_s / samples, alpha);
  if (r.download_s > 0) {
    fold_positive(profile.download_bytes_per_s,
                  static_cast<double>(r.download_bytes) / r.download_s, alpha);
  }
  if (r.upload_s > 0) {
    fold_positive(profile.upload_bytes_per_s, static_cast<double>(r.upload_bytes) / r.upload_s,
                  alpha);
  }
  fold_positive(profile.sample_bytes, r.sample_bytes, alpha);
  const uint64_t lookups = r.cache_hits + r.cache_misses;
  if (lookups > 0) {
    profile.cache_hit_ratio.fold(static_cast<double>(r.cache_hits) / static_cast<double>(lookups),
                                 alpha);
  }
  const double misses = static_cast<double>(lookups > 0 ? r.cache_misses : r.samples);
  if (r.io_s > 0 && profile.sample_bytes.known()) {
    fold_positive(profile.storage_read_bytes_per_s, misses * profile.sample_bytes.mean / r.io_s,
                  alpha);
  }
  profile.utility = statistical_utility(unique_samples(r.samples, profile.dataset_size), r.samples,
                                        r.loss_sq_sum);
  profile.utility_round = r.round;
  profile.feedback_round = r.round;
  profile.feedback_utility = profile.utility;
  profile.duration_floor_s = 0;
  ++profile.completions;
  return ok_status();
}

void observe_missed_deadline(ClientProfile& profile) { ++profile.missed_deadlines; }

Status observe_not_kept(ClientProfile& profile, const NotKeptReport& report) {
  FEDCASE_RETURN_IF_ERROR(
      check_measurements({report.mean_utility, report.ran_s}, "not-kept report"));
  profile.feedback_round = report.round;
  profile.feedback_utility = report.mean_utility;
  profile.duration_floor_s = report.ran_s;
  return ok_status();
}

nlohmann::json profile_to_json(const ClientProfile& p) {
  const Availability& a = p.availability;
  return {
      {"id", p.id},
      {"dataset_size", p.dataset_size},
      {"cache_capacity_bytes", p.cache_capacity_bytes},
      {"compute_ms_per_sample", smoothed_to_json(p.compute_ms_per_sample)},
      {"download_bytes_per_s", smoothed_to_json(p.download_bytes_per_s)},
      {"upload_bytes_per_s", smoothed_to_json(p.upload_bytes_per_s)},
      {"storage_read_bytes_per_s", smoothed_to_json(p.storage_read_bytes_per_s)},
      {"sample_bytes", smoothed_to_json(p.sample_bytes)},
      {"cache_hit_ratio", smoothed_to_json(p.cache_hit_ratio)},
      {"availability",
       {{"last_seen_s", a.last_seen_s},
        {"online_since_s", a.online_since_s},
        {"session_s", smoothed_to_json(a.session_s)},
        {"offline_s", smoothed_to_json(a.offline_s)},
        {"steered_back_by_s", a.steered_back_by_s}}},
      {"utility", p.utility},
      {"utility_round", p.utility_round},
      {"feedback_round", p.feedback_round},
      {"feedback_utility", p.feedback_utility},
      {"duration_floor_s", p.duration_floor_s},
      {"last_selected_round", p.last_selected_round},
      {"times_selected", p.times_selected},
      {"completions", p.completions},
      {"missed_deadlines", p.missed_deadlines},
  };
}

Result<ClientProfile> profile_from_json(const nlohmann::json& json) {
  ClientProfile p;
  ObjectReader r(json, "profile");
  r.require("id")
      .integer("id", p.id)
      .integer("dataset_size", p.dataset_size)
      .integer("cache_capacity_bytes", p.cache_capacity_bytes)
      .merge(smoothed_from_json(r, "compute_ms_per_sample", p.compute_ms_per_sample))
      .merge(smoothed_from_json(r, "download_bytes_per_s", p.download_bytes_per_s))
      .merge(smoothed_from_json(r, "upload_bytes_per_s", p.upload_bytes_per_s))
      .merge(smoothed_from_json(r, "storage_read_bytes_per_s", p.storage_read_bytes_per_s))
      .merge(smoothed_from_json(r, "sample_bytes", p.sample_bytes))
      .merge(smoothed_from_json(r, "cache_hit_ratio", p.cache_hit_ratio))
      .merge(availability_from_json(r, p.availability))
      .number("utility", p.utility, 0, kInf)
      .integer("utility_round", p.utility_round)
      .integer("feedback_round", p.feedback_round)
      .number("feedback_utility", p.feedback_utility, 0, kInf)
      .number("duration_floor_s", p.duration_floor_s, 0, kInf)
      .integer("last_selected_round", p.last_selected_round)
      .integer("times_selected", p.times_selected)
      .integer("completions", p.completions)
      .integer("missed_deadlines", p.missed_deadlines);
  FEDCASE_RETURN_IF_ERROR(r.status());
  if (!json.contains("feedback_round")) {
    // Stored before selection feedback existed: the last completion was the last feedback.
    p.feedback_round = p.utility_round;
    p.feedback_utility = p.utility;
  }
  if (p.cache_hit_ratio.mean > 1) {
    return invalid_argument("profile.cache_hit_ratio.mean must be in [0, 1]");
  }
  return p;
}

}  // namespace fedcase::scheduling
