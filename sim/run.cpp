#include "sim/run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace fedcase::sim {

TargetTracker::TargetTracker(double target, uint32_t sustained_evaluations)
    : target_(target), needed_(std::max<uint32_t>(1, sustained_evaluations)) {}

void TargetTracker::observe(bool committed, double accuracy, const TargetReached& now) {
  if (!committed || sustained_) return;  // no new evaluation, or nothing left to find
  if (accuracy < target_) {
    streak_.reset();
    streak_length_ = 0;
    return;
  }
  if (!first_) first_ = now;
  if (!streak_) streak_ = now;
  if (++streak_length_ >= needed_) sustained_ = streak_;
}

Result<RunSummary> run_simulation(Simulator& simulator, const SimConfig& config,
                                  const std::function<void(const RoundRecord&)>& on_round) {
  const auto start = std::chrono::steady_clock::now();
  RunSummary out;
  out.policy = simulator.policy();
  out.seed = config.job.seed;
  out.clients = simulator.fleet().size();
  out.target_accuracy = config.job.target_accuracy;
  TargetTracker target(config.job.target_accuracy, config.sustained_evaluations);
  out.sustained_evaluations = target.sustained_evaluations();
  double hit_sum = 0;
  while (simulator.rounds() < config.job.rounds && simulator.now_s() < config.max_virtual_s) {
    auto record = simulator.run_round();
    if (!record.ok()) {
      if (record.status().code() == Code::kResourceExhausted) break;
      return record.status();
    }
    if (on_round) on_round(*record);
    out.rounds = record->round;
    out.virtual_s = record->close_s;
    out.final_accuracy = record->accuracy;
    out.best_accuracy = std::max(out.best_accuracy, record->accuracy);
    hit_sum += record->hit_ratio;
    out.client_s += record->client_s;
    out.wasted += record->wasted;
    out.bytes += record->bytes;
    target.observe(record->committed, record->accuracy,
                   {record->close_s, record->round, out.client_s, out.wasted, out.bytes});
    out.first = target.first();
    out.sustained = target.sustained();
    if (out.sustained && config.stop_at_target) break;
  }
  out.mean_hit_ratio = out.rounds ? hit_sum / double(out.rounds) : 0;
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::string round_csv_header() {
  return "virtual_s,round,accuracy,loss,participants,dropped,hit_ratio,client_s,wasted,"
         "mean_staleness";
}

std::string round_csv_row(const RoundRecord& r) {
  char line[256];
  std::snprintf(line, sizeof(line), "%.3f,%llu,%.4f,%.4f,%zu,%zu,%.4f,%.1f,%zu,%.3f", r.close_s,
                static_cast<unsigned long long>(r.round), r.accuracy, r.loss, r.participants,
                r.dropped, r.hit_ratio, r.client_s, r.wasted, r.mean_staleness);
  return line;
}

nlohmann::ordered_json summary_json(const RunSummary& s) {
  nlohmann::ordered_json j;
  j["policy"] = s.policy;
  j["seed"] = s.seed;
  j["clients"] = s.clients;
  j["target_accuracy"] = s.target_accuracy;
  j["sustained_evaluations"] = s.sustained_evaluations;
  using Json = nlohmann::ordered_json;
  auto time_of = [](const std::optional<TargetReached>& t) { return t ? Json(t->time_s) : Json(); };
  auto round_of = [](const std::optional<TargetReached>& t) { return t ? Json(t->round) : Json(); };
  j["time_to_target_s"] = time_of(s.first);
  j["rounds_to_target"] = round_of(s.first);
  j["sustained_time_to_target_s"] = time_of(s.sustained);
  j["sustained_rounds_to_target"] = round_of(s.sustained);
  j["rounds"] = s.rounds;
  j["virtual_s"] = s.virtual_s;
  j["final_accuracy"] = s.final_accuracy;
  j["best_accuracy"] = s.best_accuracy;
  j["mean_hit_ratio"] = s.mean_hit_ratio;
  j["client_s"] = s.client_s;
  j["wasted_updates"] = s.wasted;
  j["bytes"] = s.bytes;
  j["sustained_bytes_to_target"] = s.sustained ? Json(s.sustained->bytes) : Json();
  j["wall_s"] = s.wall_s;
  return j;
}

}  // namespace fedcase::sim
