#include "server/core/secure/secure_copy.h"

#include <nlohmann/json.hpp>

#include "common/crash_point.h"
#include "secagg/params.h"
#include "secagg/round_crypto.h"

namespace fedcase::server {
namespace {

std::string client_name(ClientId c) { return "client " + std::to_string(c); }

}  // namespace

SecureRoundCopy::SecureRoundCopy(Setup setup, TaskNotifier& notifier)
    : job_(setup.job),
      round_(setup.round),
      invitees_(setup.invitees.begin(), setup.invitees.end()),
      words_(setup.vector_length + 1),
      word_bytes_(secagg::word_bytes(setup.bits)),
      signing_keys_(std::move(setup.signing_keys)),
      relay_(std::move(setup.relay)),
      behind_(std::move(setup.behind)),
      notifier_(notifier),
      partial_(words_, word_bytes_, setup.threads, secagg::max_held_inputs(setup.degree)) {}

Status SecureRoundCopy::check_stage(const char* after, const char* before, ClientId client,
                                    ClientId named, JobId job, RoundIndex round) {
  const std::string where = "round " + std::to_string(round_) + " of job " + std::to_string(job_);
  {
    MutexLock lock(mu_);
    if (!ended_.empty()) return conflict(ended_);
    if (before && published_.count(before)) return conflict(where + " is past that stage");
    if (!after || published_.count(after)) {
      if (named != client) {
        return permission_denied("the message names " + client_name(named) + ", not its sender");
      }
      if (job != job_ || round != round_) {
        return permission_denied("the message is for another job or round than " + where);
      }
      if (!invitees_.count(client)) {
        return permission_denied(client_name(client) + " is not invited to " + where);
      }
      if (after && !published_.at(after).count(client)) {
        return permission_denied(client_name(client) + " did not complete the previous stage of " +
                                 where);
      }
      return ok_status();
    }
  }
  // The client had the stage's message from another replica that heard of it first.
  if (behind_) behind_();
  return unavailable(where + " is catching up with its owner's stage here; retry shortly");
}

Status SecureRoundCopy::receive(const char* kind, const char* after, const char* before,
                                ClientId client, ClientId named, JobId job, RoundIndex round,
                                const std::string& body) {
  FEDCASE_RETURN_IF_ERROR(check_stage(after, before, client, named, job, round));
  Status relayed = relay_(kind, client, body);
  if (relayed.ok()) crash_point("relayed");
  if (relayed.code() == Code::kConflict) {
    return conflict(client_name(client) + " already sent its '" + kind + "' message, or round " +
                    std::to_string(round_) + " of job " + std::to_string(job_) + " is over");
  }
  return relayed;
}

Status SecureRoundCopy::receive_keys(ClientId client, const protocol::SecAggAdvertiseKeys& m) {
  return receive(stage_kind::kKeys, nullptr, stage_kind::kKeysReply, client, m.client, m.job,
                 m.round, protocol::write_secagg_advertise_keys(m).dump());
}

Status SecureRoundCopy::receive_shares(ClientId client, const protocol::SecAggShares& m) {
  return receive(stage_kind::kShares, stage_kind::kKeysReply, stage_kind::kForwarded, client,
                 m.client, m.job, m.round, protocol::write_secagg_shares(m).dump());
}

Status SecureRoundCopy::receive_unmask_response(ClientId client,
                                                const protocol::SecAggUnmaskResponse& m) {
  return receive(stage_kind::kUnmask, stage_kind::kUnmaskRequest, nullptr, client, m.client, m.job,
                 m.round, protocol::write_secagg_unmask_response(m).dump());
}

Status SecureRoundCopy::receive_masked_input(ClientId client, const protocol::SecAggMaskedInput& h,
                                             std::string_view body,
                                             const std::function<Status()>& record) {
  MutexLock one_at_a_time(inputs_mu_);
  FEDCASE_RETURN_IF_ERROR(check_stage(stage_kind::kForwarded, stage_kind::kUnmaskRequest, client,
                                      h.client, h.job, h.round));
  if (h.words != words_ || h.word_bytes != word_bytes_) {
    return unprocessable("the masked vector must hold " + std::to_string(words_) + " words of " +
                         std::to_string(word_bytes_) + " bytes");
  }
  FEDCASE_RETURN_IF_ERROR(protocol::check_masked_vector(h, body.size()));
  FEDCASE_RETURN_IF_ERROR(check_refused_forwarded(client, h.refused_shares));
  FEDCASE_RETURN_IF_ERROR(partial_.can_take(h));
  // A second input of the client is refused by `record` (its round place is taken).
  FEDCASE_RETURN_IF_ERROR(record());
  return partial_.fold(h, body);
}

Status SecureRoundCopy::check_refused_forwarded(ClientId client,
                                                const std::vector<ClientId>& refused) const {
  if (refused.empty()) return ok_status();
  std::string forwarded;
  {
    MutexLock lock(mu_);
    forwarded = published_.at(stage_kind::kForwarded).at(client);  // check_stage saw both
  }
  auto message = protocol::read_secagg_forwarded_shares(
      nlohmann::json::parse(forwarded, nullptr, false));
  if (!message.ok()) return message.status();
  std::set<ClientId> senders;
  for (const protocol::SecAggCiphertext& share : message->shares) senders.insert(share.client);
  for (ClientId c : refused) {
    if (senders.count(c) == 0) {
      return invalid_argument(client_name(client) + " refuses the share of " + client_name(c) +
                              ", which it was not forwarded");
    }
  }
  return ok_status();
}

Result<std::optional<std::string>> SecureRoundCopy::published_message(const char* kind,
                                                                      ClientId client,
                                                                      const char* missing) const {
  MutexLock lock(mu_);
  if (!ended_.empty()) return conflict(ended_);
  auto stage = published_.find(kind);
  if (stage == published_.end()) return std::optional<std::string>();
  auto it = stage->second.find(client);
  if (it == stage->second.end()) {
    return permission_denied(client_name(client) + " did not " + missing + " in round " +
                             std::to_string(round_) + " of job " + std::to_string(job_));
  }
  return std::optional<std::string>(it->second);
}

Result<std::optional<std::string>> SecureRoundCopy::keys_reply(ClientId client) const {
  return published_message(stage_kind::kKeysReply, client, "advertise its keys in time");
}

Result<std::optional<std::string>> SecureRoundCopy::forwarded_shares(ClientId client) const {
  return published_message(stage_kind::kForwarded, client, "share its keys in time");
}

Result<std::optional<std::string>> SecureRoundCopy::unmask_request(ClientId client) const {
  return published_message(stage_kind::kUnmaskRequest, client, "send its masked input");
}

bool SecureRoundCopy::published(const std::string& kind) const {
  MutexLock lock(mu_);
  return published_.count(kind) != 0;
}

Status SecureRoundCopy::check_key_lists(const std::map<ClientId, std::string>& messages) const {
  const std::map<ClientId, std::string> registered =
      signing_keys_(std::vector<ClientId>(invitees_.begin(), invitees_.end()));
  // A client's keys appear in each of its neighbours' lists: each copy is checked once.
  std::map<ClientId, protocol::SecAggPeerKeys> checked;
  for (const auto& [client, body] : messages) {
    auto keys = protocol::read_secagg_keys(nlohmann::json::parse(body, nullptr, false));
    if (!keys.ok()) return keys.status();
    for (const protocol::SecAggPeerKeys& peer : keys->key_list.neighbours) {
      auto seen = checked.find(peer.client);
      if (seen != checked.end() && seen->second == peer) continue;
      if (!invitees_.count(peer.client)) {
        return permission_denied(client_name(client) + "'s key list names " +
                                 client_name(peer.client) + ", who is not invited");
      }
      auto key = registered.find(peer.client);
      if (key == registered.end()) {
        return unavailable("the registration of " + client_name(peer.client) +
                           " is not read here yet");
      }
      if (key->second.empty()) {
        return permission_denied(client_name(peer.client) + " registered no signing key");
      }
      if (key->second != peer.signing_public_key) {
        return permission_denied(client_name(client) + "'s key list gives " +
                                 client_name(peer.client) +
                                 " a signing key other than the one it registered");
      }
      FEDCASE_RETURN_IF_ERROR(secagg::check_keys_signature(
          job_, round_, peer.client, peer.cipher_public_key, peer.mask_public_key,
          peer.signing_public_key, peer.signature));
      checked[peer.client] = peer;
    }
  }
  return ok_status();
}

Status SecureRoundCopy::publish(const std::string& kind,
                                std::map<ClientId, std::string> messages) {
  if (kind == stage_kind::kKeysReply) {
    Status checked = check_key_lists(messages);
    if (checked.code() == Code::kUnavailable) return checked;
    if (!checked.ok()) {
      end("the key lists in the store fail their check: " + checked.message());
      return checked;
    }
  }
  {
    MutexLock lock(mu_);
    if (!ended_.empty() || published_.count(kind)) return ok_status();
    published_[kind] = std::move(messages);
  }
  notifier_.notify(std::vector<ClientId>(invitees_.begin(), invitees_.end()));
  return ok_status();
}

size_t SecureRoundCopy::inputs() const {
  MutexLock one_at_a_time(inputs_mu_);
  return partial_.inputs();
}

std::string SecureRoundCopy::partial() const {
  MutexLock one_at_a_time(inputs_mu_);
  return partial_.encode();
}

void SecureRoundCopy::end(const std::string& why) {
  {
    MutexLock lock(mu_);
    if (!ended_.empty()) return;
    ended_ = why;
  }
  notifier_.notify(std::vector<ClientId>(invitees_.begin(), invitees_.end()));
}

}  // namespace fedcase::server
