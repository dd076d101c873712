#include "storage/errors.h"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <utility>

namespace fedcase::storage {

Status db_unavailable(std::string detail) {
  return {Code::kUnavailable, kUnavailableMessage, std::move(detail)};
}

Status db_failed(std::string detail) {
  return {Code::kInternal, kFailedMessage, std::move(detail)};
}

Status commit_outcome_unknown(const Status& lost) {
  return db_unavailable("the connection was lost during the commit, whose outcome is unknown: " +
                        (lost.detail().empty() ? lost.message() : lost.detail()));
}

Status conflict_as(Status status, std::string message) {
  if (status.code() != Code::kConflict) return status;
  return {Code::kConflict, std::move(message), status.detail()};
}

std::vector<std::pair<size_t, size_t>> password_spans(const std::string& url) {
  std::vector<std::pair<size_t, size_t>> spans;
  const size_t scheme = url.find("://");
  if (scheme != std::string::npos) {
    const size_t start = scheme + 3;
    const size_t authority_end = std::min(url.find_first_of("/?#", start), url.size());
    const std::string_view authority(url.data() + start, authority_end - start);
    const size_t at = authority.rfind('@');
    const size_t colon = authority.find(':');
    if (at != std::string_view::npos && colon < at) {
      spans.emplace_back(start + colon + 1, at - colon - 1);
    }
    for (size_t key = url.find('?', authority_end); key < url.size();) {
      ++key;  // past '?' or '&'
      const size_t end = std::min(url.find_first_of("&#", key), url.size());
      const size_t equals = url.find('=', key);
      if (equals < end && url.compare(key, equals - key, "password") == 0) {
        spans.emplace_back(equals + 1, end - equals - 1);
      }
      key = end < url.size() && url[end] == '&' ? end : url.size();
    }
    return spans;
  }
  auto space = [&](size_t i) {
    return i < url.size() && std::isspace(static_cast<unsigned char>(url[i]));
  };
  for (size_t i = 0; i < url.size();) {
    while (space(i)) ++i;
    const size_t key = i;
    while (i < url.size() && url[i] != '=' && !space(i)) ++i;
    const std::string_view name(url.data() + key, i - key);
    while (space(i)) ++i;
    if (i >= url.size() || url[i] != '=') break;  // not key=value: libpq refuses it anyway
    ++i;
    while (space(i)) ++i;
    const size_t value = i;
    const bool quoted = i < url.size() && url[i] == '\'';
    for (i += quoted; i < url.size() && (quoted ? url[i] != '\'' : !space(i)); ++i) {
      if (url[i] == '\\') ++i;  // an escaped character
    }
    i = std::min(i + quoted, url.size());  // past the closing quote
    if (name == "password") spans.emplace_back(value, i - value);
  }
  return spans;
}

std::string redacted(std::string url) {
  const auto spans = password_spans(url);
  for (auto it = spans.rbegin(); it != spans.rend(); ++it)
    url.replace(it->first, it->second, "***");
  return url;
}

std::string round_name(JobId job, RoundIndex round) {
  return "round " + std::to_string(round) + " of job " + std::to_string(job);
}

Status check_lease_request(const std::string& holder, double duration_s) {
  if (holder.empty()) return invalid_argument("a lease holder must be named");
  if (!(duration_s > 0)) return invalid_argument("a lease lasts more than 0 seconds");
  return ok_status();
}

Status check_epoch(JobId job, Epoch epoch, Epoch current, const std::string& holder) {
  if (current == epoch) return ok_status();
  const std::string refused = "a write at lease epoch " + std::to_string(epoch) + " is refused";
  if (current == kUnleased) {
    return conflict("job " + std::to_string(job) + " has never been leased: " + refused);
  }
  return {Code::kConflict,
          "job " + std::to_string(job) + "'s lease epoch " + std::to_string(epoch) +
              " is not current (the job is at epoch " + std::to_string(current) + "): " + refused,
          "epoch " + std::to_string(current) + " was acquired by '" + holder + "'"};
}

Status lease_refused(const LeaseRecord& lease) {
  return {Code::kConflict,
          "job " + std::to_string(lease.job) + " is leased at epoch " +
              std::to_string(lease.epoch) + " for " + std::to_string(lease.remaining_s) + " s more",
          "held by '" + lease.holder + "'"};
}

Status check_admission(JobId job, RoundIndex round, ClientId client, const AdmissionFacts& f) {
  const std::string name = round_name(job, round);
  if (!f.round_known) return conflict(name + " not found");
  if (f.has_update) {
    return conflict("client " + std::to_string(client) + " already has an update in " + name);
  }
  if (f.target > 0) {
    if (f.state != RoundState::kOpen) return conflict(name + " is concluded");
    if (!f.admitting) return conflict(name + " is closed to admission");
    if (f.admitted >= f.target) {
      return conflict(name + " is full (" + std::to_string(f.target) + " updates)");
    }
  }
  if (!f.client_known) return conflict("client " + std::to_string(client) + " not found");
  return ok_status();
}

Status check_admitting(JobId job, RoundIndex round, bool round_known, bool open, bool admitting) {
  const std::string name = round_name(job, round);
  if (!round_known) return conflict(name + " not found");
  if (!open) return conflict(name + " is concluded");
  if (!admitting) return conflict(name + " is closed to admission");
  return ok_status();
}

Status nothing_to_withdraw(JobId job, RoundIndex round, ClientId client,
                           const std::string& replica) {
  return {
      Code::kConflict,
      "no update of client " + std::to_string(client) + " to withdraw in " + round_name(job, round),
      "replica '" + replica + "' admitted none"};
}

Status check_stage_kinds(const std::vector<StageMessage>& messages) {
  for (const StageMessage& m : messages) {
    if (m.kind.empty()) return invalid_argument("a stage message needs a kind");
  }
  return ok_status();
}

Status upload_not_found(JobId job, RoundIndex round, const std::string& id) {
  return not_found("no upload " + id + " in " + round_name(job, round));
}

Status next_chunk_expected(const std::string& id, uint64_t stored) {
  return conflict("upload " + id + " holds " + std::to_string(stored) +
                  " chunks: the next one stored is chunk " + std::to_string(stored));
}

Status chunk_not_stored(const std::string& id, uint64_t index) {
  return not_found("upload " + id + " holds no chunk " + std::to_string(index));
}

Status check_partial(const PartialRecord& p, bool round_known, bool open, bool admitting,
                     uint64_t admitted) {
  const std::string name = round_name(p.job, p.round);
  if (!round_known) return conflict(name + " not found");
  if (!open) return conflict(name + " is not open");
  if (admitting) {
    return conflict(name + " still admits updates: its partials come after close_admission");
  }
  if (admitted != p.updates) {
    return {Code::kConflict,
            "a partial of " + name + " holds " + std::to_string(p.updates) +
                " updates, and the store admitted " + std::to_string(admitted) + " for its replica",
            "replica '" + p.replica + "'"};
  }
  return ok_status();
}

}  // namespace fedcase::storage
