#pragma once
// Internal to protocol/ (not installed, not for other modules): the readers of every message
// in one overload set, each able to report the member names it asked for, so that fields.cpp
// can list the fields each message's reader reads, and small helpers shared by the readers.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/json_read.h"
#include "common/status.h"
#include "protocol/error_reply.h"
#include "protocol/eval_report.h"
#include "protocol/registration.h"
#include "protocol/secagg.h"
#include "protocol/task_offer.h"
#include "protocol/task_status.h"
#include "protocol/update_meta.h"
#include "protocol/upload_session.h"

namespace fedcase::protocol::internal {

// The member names a reader asked for; null when nobody wants them.
using Keys = std::vector<std::string>;

// Each reads `value` (the object named `where` in error messages) into `out`, leaving the
// member names it asked for in `keys` when not null.
Status read(const nlohmann::json& value, const std::string& where, EvalReport& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, UpdateMeta& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, TrainingSettings& out,
            Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, EvaluationSettings& out,
            Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, CacheDirectives& out,
            Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, Compression& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, TaskOffer& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, DeviceInfo& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, Registration& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, RegistrationReply& out,
            Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, TaskStatus& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, UploadOpen& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, UploadState& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggParams& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggAdvertiseKeys& out,
            Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggPeerKeys& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggGraph& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggKeyList& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggKeys& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggTask& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggCiphertext& out,
            Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggShares& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggForwardedShares& out,
            Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggMaskedInput& out,
            Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggUnmaskRequest& out,
            Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggShare& out, Keys* keys);
Status read(const nlohmann::json& value, const std::string& where, SecAggUnmaskResponse& out,
            Keys* keys);
// The member names of the `error` object.
Status read(const nlohmann::json& value, const std::string& where, ErrorReply& out, Keys* keys);

// `reader`'s status, after leaving the names it asked for in `keys` (when not null).
inline Status finish(const ObjectReader& reader, Keys* keys) {
  if (keys != nullptr) *keys = reader.keys();
  return reader.status();
}

// Reads the nested object `key` of `parent` into `out` when present (marking it as read).
// Returns whether it was present; its errors are merged into `parent`.
template <class T>
bool read_nested(ObjectReader& parent, const char* key, T& out) {
  const nlohmann::json* member = parent.member(key);
  if (member == nullptr) return false;
  parent.merge(read(*member, parent.path(key), out, nullptr));
  return true;
}

// Records an error in `reader` for `key` unless `ok`.
inline void check(ObjectReader& reader, bool ok, const char* key, const std::string& rule) {
  if (!ok) reader.merge(invalid_argument(reader.path(key) + " " + rule));
}

// Reads a message with `T`'s internal reader as the public readers do.
template <class T>
Result<T> read_message(const nlohmann::json& value, const std::string& where) {
  T out;
  Status s = read(value, where, out, nullptr);
  if (!s.ok()) return s;
  return out;
}

}  // namespace fedcase::protocol::internal
