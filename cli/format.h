#pragma once
// Text views of the admin API's answers (docs/protocol.md): the tables and summaries the
// `fedcase` subcommands print. Pure functions of the coordinator's JSON; each throws
// nlohmann::json::exception when a field the view needs is missing or of the wrong type.
// Fields that appear only later (test accuracy, round metrics, privacy) print as "-" or not at
// all while absent.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fedcase::cli {

// Aligned columns, two spaces apart, each as wide as its widest cell, one line a row, the
// header (unless empty) first. Trailing spaces are trimmed.
std::string render_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows);

// "42s", "5m", "3h", "2d" (whole units, rounded down); negative counts as 0.
std::string format_age(double seconds);
// Bytes per second in decimal units with one decimal: "950.0 B/s", "12.5 MB/s".
std::string format_rate(double bytes_per_s);
// `value` with `decimals` digits after the point.
std::string format_fixed(double value, int decimals);

// GET /v1/admin/jobs: ID, NAME, STATE, POLICY, MODEL, ROUND ("4 (open)" while open),
// MODEL VERSION, TEST ACCURACY.
std::string jobs_table(const nlohmann::json& jobs_reply);
// One job summary (POST /v1/admin/jobs, a row of the list) as one line.
std::string job_line(const nlohmann::json& summary);
// GET /v1/admin/jobs/{id}: state, model and parameters, round, selection policy, aggregation
// and server optimizer, target and result, test accuracy, privacy spent (DP jobs), and how
// many rounds there were by state.
std::string job_detail_text(const nlohmann::json& detail);
// The answer of pause/resume/cancel: "job 3 is paused".
std::string job_state_line(const nlohmann::json& reply);

// GET /v1/admin/clients with only the clients that have an expected duration for `job`.
nlohmann::json clients_for_job(const nlohmann::json& clients_reply, uint64_t job);
// Columns: ID, AVAILABLE, LAST SEEN, EXPECTED (with `job`, that job's expected duration; else
// every job's, as "job:seconds"), COMPUTE, DOWNLOAD, UPLOAD, CACHE HITS, UTILITY, SELECTED;
// with `job`, only the clients clients_for_job keeps. `now_s` (Unix seconds) dates LAST SEEN.
std::string clients_table(const nlohmann::json& clients_reply, std::optional<uint64_t> job,
                          double now_s);

// GET /v1/admin/jobs/{id}/models: a line with the job's latest and best versions and the size
// of a version, then VERSION (marked "latest", "best"), ROUND, ACCURACY (the job's evaluation
// target's), AGE (at `now_s`).
std::string models_table(const nlohmann::json& models_reply, double now_s);
// "12.3 KB", "4.5 MB": bytes in decimal units with one decimal ("512 B" below 1 KB).
std::string format_bytes(double bytes);

// The `rounds` of a job detail: ROUND, STATE, SELECTED, UPDATES, DROPPED, SECONDS,
// TEST ACCURACY, FAILURE.
std::string rounds_table(const nlohmann::json& detail);

}  // namespace fedcase::cli
