#include "cli/format.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace fedcase::cli {

using nlohmann::json;

namespace {

// A number field as fixed text, or "-" when absent or null.
std::string fixed_or_dash(const json& object, const char* key, int decimals) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return "-";
  return format_fixed(it->get<double>(), decimals);
}

// The mean of a smoothed profile value ({"mean", "count"}), when it has been observed.
std::optional<double> observed(const json& profile, const char* key) {
  auto it = profile.find(key);
  if (it == profile.end() || it->at("count").get<uint64_t>() == 0) return std::nullopt;
  return it->at("mean").get<double>();
}

std::string seconds_text(double seconds) { return format_fixed(seconds, 1) + "s"; }

std::string round_text(const json& summary) {
  std::string text = std::to_string(summary.at("round").get<uint64_t>());
  if (summary.at("round_open").get<bool>()) text += " (open)";
  return text;
}

}  // namespace

std::string render_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows) {
  std::vector<const std::vector<std::string>*> lines;
  if (!header.empty()) lines.push_back(&header);
  for (const auto& row : rows) lines.push_back(&row);
  std::vector<size_t> widths;
  for (const auto* line : lines) {
    if (widths.size() < line->size()) widths.resize(line->size(), 0);
    for (size_t c = 0; c < line->size(); ++c) widths[c] = std::max(widths[c], (*line)[c].size());
  }
  std::string out;
  for (const auto* line : lines) {
    std::string text;
    for (size_t c = 0; c < line->size(); ++c) {
      if (c > 0) text += "  ";
      text += (*line)[c];
      text.append(widths[c] - (*line)[c].size(), ' ');
    }
    text.erase(text.find_last_not_of(' ') + 1);
    out += text + "\n";
  }
  return out;
}

std::string format_age(double seconds) {
  const uint64_t s = seconds > 0 ? uint64_t(seconds) : 0;
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m";
  if (s < 86400) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

std::string format_rate(double bytes_per_s) {
  static const char* const kUnits[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
  size_t unit = 0;
  while (bytes_per_s >= 999.95 && unit + 1 < std::size(kUnits)) {
    bytes_per_s /= 1000;
    ++unit;
  }
  return format_fixed(bytes_per_s, 1) + " " + kUnits[unit];
}

std::string format_bytes(double bytes) {
  if (bytes < 1000) return std::to_string(int64_t(std::max(0.0, bytes))) + " B";
  const char* units[] = {"KB", "MB", "GB", "TB"};
  size_t unit = 0;
  bytes /= 1000;
  while (bytes >= 1000 && unit + 1 < std::size(units)) {
    bytes /= 1000;
    ++unit;
  }
  return format_fixed(bytes, 1) + " " + units[unit];
}

std::string format_fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string jobs_table(const json& jobs_reply) {
  std::vector<std::vector<std::string>> rows;
  for (const json& j : jobs_reply.at("jobs")) {
    rows.push_back({std::to_string(j.at("job_id").get<uint64_t>()), j.at("name").get<std::string>(),
                    j.at("state").get<std::string>(), j.at("selection_policy").get<std::string>(),
                    j.at("model").get<std::string>(), round_text(j),
                    std::to_string(j.at("model_version").get<uint64_t>()),
                    fixed_or_dash(j, "test_accuracy", 4)});
  }
  return render_table(
      {"ID", "NAME", "STATE", "POLICY", "MODEL", "ROUND", "MODEL VERSION", "TEST ACCURACY"}, rows);
}

std::string job_line(const json& summary) {
  return "job " + std::to_string(summary.at("job_id").get<uint64_t>()) + " \"" +
         summary.at("name").get<std::string>() + "\": " + summary.at("state").get<std::string>() +
         ", round " + round_text(summary) + ", model version " +
         std::to_string(summary.at("model_version").get<uint64_t>()) + "\n";
}

std::string job_detail_text(const json& detail) {
  const json& config = detail.at("config");
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"state", detail.at("state").get<std::string>()});
  rows.push_back({"model", config.value("model", std::string("-")) + ", " +
                               std::to_string(detail.at("parameters").get<uint64_t>()) +
                               " parameters, version " +
                               std::to_string(detail.at("model_version").get<uint64_t>())});
  std::string round = round_text(detail);
  if (auto current = detail.find("current_round"); current != detail.end()) {
    round += ": " + std::to_string(current->at("updates").get<uint64_t>()) + " updates of " +
             std::to_string(current->at("invited").get<uint64_t>()) + " invited";
  }
  if (config.contains("rounds")) {
    round += " (at most " + std::to_string(config.at("rounds").get<uint64_t>()) + ")";
  }
  rows.push_back({"round", round});
  rows.push_back({"selection policy", detail.at("selection_policy").get<std::string>()});
  rows.push_back({"aggregation", detail.at("aggregation").get<std::string>() +
                                     ", server optimizer " +
                                     detail.at("server_optimizer").get<std::string>()});
  rows.push_back({"test accuracy", fixed_or_dash(detail, "test_accuracy", 4)});
  if (config.contains("target_accuracy")) {
    const json& result = detail.at("result");
    std::string text = "target " + format_fixed(config.at("target_accuracy").get<double>(), 4);
    if (result.is_null()) {
      text += ", not reached yet";
    } else {
      text += ", reached by model version " +
              std::to_string(result.at("model_version").get<uint64_t>()) + " (round " +
              std::to_string(result.at("round").get<uint64_t>()) + ", test accuracy " +
              format_fixed(result.at("test_accuracy").get<double>(), 4) + ")";
    }
    rows.push_back({"result", text});
  }
  if (auto privacy = detail.find("privacy"); privacy != detail.end()) {
    char text[160];
    std::snprintf(text, sizeof text, "epsilon %.3f at delta %g after %llu rounds (noise %g)",
                  privacy->at("epsilon").get<double>(), privacy->at("delta").get<double>(),
                  static_cast<unsigned long long>(privacy->at("rounds").get<uint64_t>()),
                  privacy->at("noise_multiplier").get<double>());
    rows.push_back({"privacy", text});
  }
  std::map<std::string, size_t> by_state;
  const json& rounds = detail.at("rounds");
  for (const json& r : rounds) ++by_state[r.at("state").get<std::string>()];
  std::string counts = std::to_string(rounds.size());
  if (!by_state.empty()) {
    std::string parts;
    for (const auto& [state, n] : by_state) {
      parts += (parts.empty() ? "" : ", ") + std::to_string(n) + " " + state;
    }
    counts += " (" + parts + ")";
  }
  rows.push_back({"rounds", counts});
  return "job " + std::to_string(detail.at("job_id").get<uint64_t>()) + " \"" +
         detail.at("name").get<std::string>() + "\"\n" + render_table({}, rows);
}

std::string job_state_line(const json& reply) {
  return "job " + std::to_string(reply.at("job_id").get<uint64_t>()) + " is " +
         reply.at("state").get<std::string>() + "\n";
}

json clients_for_job(const json& clients_reply, uint64_t job) {
  const std::string key = std::to_string(job);
  json kept = json::array();
  for (const json& c : clients_reply.at("clients")) {
    if (c.at("expected_duration_s").contains(key)) kept.push_back(c);
  }
  return {{"clients", kept}};
}

std::string clients_table(const json& clients_reply, std::optional<uint64_t> job, double now_s) {
  const json shown = job ? clients_for_job(clients_reply, *job) : clients_reply;
  std::vector<std::vector<std::string>> rows;
  for (const json& c : shown.at("clients")) {
    const json& profile = c.at("profile");
    const json& expected = c.at("expected_duration_s");
    std::string expected_text;
    if (job) {
      expected_text = seconds_text(expected.at(std::to_string(*job)).get<double>());
    } else {
      for (const auto& [id, seconds] : expected.items()) {
        expected_text +=
            (expected_text.empty() ? "" : " ") + id + ":" + seconds_text(seconds.get<double>());
      }
      if (expected_text.empty()) expected_text = "-";
    }
    const double last_seen = c.at("last_seen").get<double>();
    auto rate = [&](const char* key) {
      auto mean = observed(profile, key);
      return mean ? format_rate(*mean) : std::string("-");
    };
    auto compute = observed(profile, "compute_ms_per_sample");
    auto hits = observed(profile, "cache_hit_ratio");
    const bool has_utility = profile.at("utility_round").get<uint64_t>() > 0;
    rows.push_back({std::to_string(c.at("client_id").get<uint64_t>()),
                    c.at("available").get<bool>() ? "yes" : "no",
                    last_seen > 0 ? format_age(now_s - last_seen) + " ago" : "never", expected_text,
                    compute ? format_fixed(*compute, 3) + " ms/sample" : "-",
                    rate("download_bytes_per_s"), rate("upload_bytes_per_s"),
                    hits ? format_fixed(*hits * 100, 1) + "%" : "-",
                    has_utility ? format_fixed(profile.at("utility").get<double>(), 2) : "-",
                    std::to_string(profile.at("times_selected").get<uint64_t>())});
  }
  return render_table({"ID", "AVAILABLE", "LAST SEEN", "EXPECTED", "COMPUTE", "DOWNLOAD", "UPLOAD",
                       "CACHE HITS", "UTILITY", "SELECTED"},
                      rows);
}

std::string models_table(const json& reply, double now_s) {
  const uint64_t latest = reply.at("latest").get<uint64_t>();
  const json& best = reply.at("best");
  std::string summary = "job " + std::to_string(reply.at("job_id").get<uint64_t>()) +
                        ": latest version " + std::to_string(latest) + ", best " +
                        (best.is_null() ? std::string("- (nothing evaluated yet)")
                                        : std::to_string(best.get<uint64_t>())) +
                        " by " + reply.at("evaluation_target").get<std::string>() + " accuracy; " +
                        format_bytes(reply.at("bytes").get<double>()) + " a version (" +
                        std::to_string(reply.at("parameters").get<uint64_t>()) + " parameters)\n";
  std::vector<std::vector<std::string>> rows;
  for (const json& m : reply.at("models")) {
    const uint64_t version = m.at("version").get<uint64_t>();
    std::string marks;
    if (version == latest) marks += " latest";
    if (!best.is_null() && version == best.get<uint64_t>()) marks += " best";
    const json& round = m.at("round");
    rows.push_back({std::to_string(version) + marks,
                    round.is_null() ? "-" : std::to_string(round.get<uint64_t>()),
                    fixed_or_dash(m, "accuracy", 4),
                    format_age(now_s - m.at("created_at").get<double>())});
  }
  return summary + render_table({"VERSION", "ROUND", "ACCURACY", "AGE"}, rows);
}

std::string rounds_table(const json& detail) {
  std::vector<std::vector<std::string>> rows;
  const json none = json::object();
  for (const json& r : detail.at("rounds")) {
    const json& m = r.at("metrics").is_object() ? r.at("metrics") : none;
    auto count = [&](const char* key) {
      auto it = m.find(key);
      return it == m.end() ? std::string("-") : std::to_string(it->size());
    };
    auto updates = m.find("updates");
    rows.push_back({std::to_string(r.at("round").get<uint64_t>()), r.at("state").get<std::string>(),
                    std::to_string(r.at("selected").size()),
                    updates == m.end() ? "-" : std::to_string(updates->get<uint64_t>()),
                    count("dropped"), fixed_or_dash(m, "round_seconds", 1),
                    fixed_or_dash(m, "test_accuracy", 4), m.value("failure", std::string())});
  }
  return render_table(
      {"ROUND", "STATE", "SELECTED", "UPDATES", "DROPPED", "SECONDS", "TEST ACCURACY", "FAILURE"},
      rows);
}

}  // namespace fedcase::cli
