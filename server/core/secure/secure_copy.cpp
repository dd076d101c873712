#include "server/core/secure/secure_copy.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/crash_point.h"
#include "secagg/params.h"
#include "secagg/round_crypto.h"

namespace fedcase::server {
namespace {

std::string client_name(ClientId c) { return "client " + std::to_string(c); }

}  // namespace

SecureRoundCopy::SecureRoundCopy(Setup setup, TaskNotifier& notifier)
    : identity_{setup.job, setup.round, {setup.invitees.begin(), setup.invitees.end()}},
      invitee_list_(identity_.invitees.begin(), identity_.invitees.end()),
      words_(setup.vector_length + 1),
      word_bytes_(secagg::word_bytes(setup.bits)),
      max_held_(secagg::max_held_inputs(setup.degree)),
      signing_keys_(std::move(setup.signing_keys)),
      relay_(std::move(setup.relay)),
      behind_(std::move(setup.behind)),
      notifier_(notifier),
      pool_(std::make_unique<aggregation::WorkerPool>(std::max<size_t>(1, setup.threads))) {}

Status SecureRoundCopy::check_stage(secagg::Stage stage, ClientId client, ClientId named,
                                    JobId job, RoundIndex round) {
  const std::string where = "round " + std::to_string(identity_.round) + " of job " +
                            std::to_string(identity_.job);
  {
    MutexLock lock(mu_);
    if (!ended_.empty()) return conflict(ended_);
    const secagg::Stage reached = secagg::stage_reached(
        [&](const char* kind) FEDCASE_REQUIRES(mu_) { return published_.count(kind) != 0; });
    if (reached > stage) return conflict(where + " is past that stage");
    if (reached == stage) {
      FEDCASE_RETURN_IF_ERROR(identity_.check(client, named, job, round));
      const char* opening = secagg::opening_kind(stage);
      if (opening && !published_.at(opening).count(client)) {
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

Status SecureRoundCopy::receive(secagg::Stage stage, ClientId client, ClientId named, JobId job,
                                RoundIndex round, const std::string& body) {
  FEDCASE_RETURN_IF_ERROR(check_stage(stage, client, named, job, round));
  const char* kind = secagg::client_kind(stage);
  Status relayed = relay_(kind, client, body);
  if (relayed.ok()) crash_point("relayed");
  if (relayed.code() == Code::kConflict) {
    return conflict(client_name(client) + " already sent its '" + kind + "' message, or round " +
                    std::to_string(identity_.round) + " of job " + std::to_string(identity_.job) +
                    " is over");
  }
  return relayed;
}

Status SecureRoundCopy::receive_keys(ClientId client, const protocol::SecAggAdvertiseKeys& m) {
  return receive(secagg::Stage::kAdvertiseKeys, client, m.client, m.job, m.round,
                 protocol::write_secagg_advertise_keys(m).dump());
}

Status SecureRoundCopy::receive_shares(ClientId client, const protocol::SecAggShares& m) {
  return receive(secagg::Stage::kShareKeys, client, m.client, m.job, m.round,
                 protocol::write_secagg_shares(m).dump());
}

Status SecureRoundCopy::receive_unmask_response(ClientId client,
                                                const protocol::SecAggUnmaskResponse& m) {
  return receive(secagg::Stage::kUnmask, client, m.client, m.job, m.round,
                 protocol::write_secagg_unmask_response(m).dump());
}

Status SecureRoundCopy::receive_masked_input(ClientId client, const protocol::SecAggMaskedInput& h,
                                             std::string_view body,
                                             const std::function<Status()>& record) {
  MutexLock one_at_a_time(inputs_mu_);
  FEDCASE_RETURN_IF_ERROR(
      check_stage(secagg::Stage::kMaskedInput, client, h.client, h.job, h.round));
  // The forwarded shares are published, so the input stage is open here.
  FEDCASE_RETURN_IF_ERROR(inputs_->check(client, h, body.size()));
  FEDCASE_RETURN_IF_ERROR(record());
  return inputs_->take(client, h, body);
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
                             std::to_string(identity_.round) + " of job " +
                             std::to_string(identity_.job));
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
      signing_keys_(invitee_list_);
  // A client's keys appear in each of its neighbours' lists: each copy is checked once.
  std::map<ClientId, protocol::SecAggPeerKeys> checked;
  for (const auto& [client, body] : messages) {
    auto keys = protocol::read_secagg_keys(nlohmann::json::parse(body, nullptr, false));
    if (!keys.ok()) return keys.status();
    for (const protocol::SecAggPeerKeys& peer : keys->key_list.neighbours) {
      auto seen = checked.find(peer.client);
      if (seen != checked.end() && seen->second == peer) continue;
      if (!identity_.invitees.count(peer.client)) {
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
          identity_.job, identity_.round, peer.client, peer.cipher_public_key, peer.mask_public_key,
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
  if (kind == stage_kind::kForwarded) {
    Status opened = open_inputs(messages);
    if (!opened.ok()) {
      end("the forwarded shares in the store do not read: " + opened.message());
      return opened;
    }
  }
  {
    MutexLock lock(mu_);
    if (!ended_.empty() || published_.count(kind)) return ok_status();
    published_[kind] = std::move(messages);
  }
  notifier_.notify(invitee_list_);
  return ok_status();
}

Status SecureRoundCopy::open_inputs(const std::map<ClientId, std::string>& forwarded) {
  std::map<ClientId, protocol::SecAggForwardedShares> read;
  for (const auto& [client, body] : forwarded) {
    auto message =
        protocol::read_secagg_forwarded_shares(nlohmann::json::parse(body, nullptr, false));
    if (!message.ok()) return message.status();
    read.emplace(client, std::move(message).value());
  }
  MutexLock one_at_a_time(inputs_mu_);
  if (!inputs_) {
    inputs_.emplace(secagg::MaskedInputs::roster_of(read), words_, word_bytes_, max_held_,
                    *pool_);
  }
  return ok_status();
}

size_t SecureRoundCopy::inputs() const {
  MutexLock one_at_a_time(inputs_mu_);
  return inputs_ ? inputs_->inputs() : 0;
}

std::string SecureRoundCopy::partial() const {
  MutexLock one_at_a_time(inputs_mu_);
  return inputs_ ? inputs_->encode() : std::string();
}

void SecureRoundCopy::end(const std::string& why) {
  {
    MutexLock lock(mu_);
    if (!ended_.empty()) return;
    ended_ = why;
  }
  notifier_.notify(invitee_list_);
}

}  // namespace fedcase::server
