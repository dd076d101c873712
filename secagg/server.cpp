#include "secagg/server.h"

#include <algorithm>

#include "secagg/params.h"

namespace fedcase::secagg {

Result<std::unique_ptr<SecAggServer>> SecAggServer::create(SecAggRoundSetup setup) {
  const std::set<ClientId> invitees(setup.invitees.begin(), setup.invitees.end());
  if (invitees.size() != setup.invitees.size()) {
    return invalid_argument("the invitees must be distinct");
  }
  if (invitees.size() > protocol::kMaxSecAggClients) {
    return invalid_argument("at most " + std::to_string(protocol::kMaxSecAggClients) + " invitees");
  }
  FEDCASE_RETURN_IF_ERROR(validate_params(setup.params, invitees.size()));
  Result<KeyPair> probe = generate_key_pair();
  if (!probe.ok()) return probe.status();
  Result<X25519Key> probe_key = X25519Key::load(probe->private_key);
  if (!probe_key.ok()) return probe_key.status();
  setup.threads = std::max<size_t>(1, setup.threads);
  return std::unique_ptr<SecAggServer>(new SecAggServer(std::move(setup), *probe_key));
}

SecAggServer::SecAggServer(SecAggRoundSetup setup, X25519Key probe_key)
    : pool_(std::make_unique<aggregation::WorkerPool>(setup.threads)),
      round_{setup,
             RoundIdentity{setup.job, setup.round, {setup.invitees.begin(), setup.invitees.end()}},
             std::move(probe_key),
             word_bytes(setup.params.bits),
             max_held_inputs(setup.params.degree),
             *pool_},
      current_(KeysStage(round_)) {}

Stage SecAggServer::stage_locked() const {
  switch (current_.index()) {
    case 0:
      return Stage::kAdvertiseKeys;
    case 1:
      return Stage::kShareKeys;
    case 2:
      return Stage::kMaskedInput;
    case 3:
      return Stage::kUnmask;
    default:
      return std::get<Ended>(current_).stage;
  }
}

Stage SecAggServer::stage() const {
  MutexLock lock(mu_);
  return stage_locked();
}

Status SecAggServer::failure() const {
  MutexLock lock(mu_);
  const Ended* ended = std::get_if<Ended>(&current_);
  return ended ? ended->failure : ok_status();
}

protocol::SecAggParams SecAggServer::params() const {
  MutexLock lock(mu_);
  return std::visit(
      [&](const auto& stage) -> protocol::SecAggParams {
        using S = std::decay_t<decltype(stage)>;
        if constexpr (std::is_same_v<S, KeysStage> || std::is_same_v<S, Ended>) {
          return round_.setup.params;
        } else {
          return stage.params();
        }
      },
      current_);
}

Status SecAggServer::out_of_stage(Stage wanted) const {
  if (const Ended* ended = std::get_if<Ended>(&current_); ended && !ended->failure.ok()) {
    return ended->failure;
  }
  return conflict(std::string("a ") + stage_name(wanted) + " call in the " +
                  stage_name(stage_locked()) + " stage");
}

Status SecAggServer::fail(const Status& why) {
  current_ = Ended{Stage::kFailed, conflict("secure aggregation of job " +
                                            std::to_string(round_.setup.job) + " round " +
                                            std::to_string(round_.setup.round) +
                                            " failed: " + why.message())};
  return std::get<Ended>(current_).failure;
}

template <class Next>
Status SecAggServer::enter(Result<Next> next) {
  if (!next.ok()) return fail(next.status());
  current_ = std::move(next).value();
  return ok_status();
}

Status SecAggServer::receive_keys(ClientId sender, const protocol::SecAggAdvertiseKeys& m) {
  MutexLock lock(mu_);
  auto* stage = std::get_if<KeysStage>(&current_);
  return stage ? stage->receive(sender, m) : out_of_stage(Stage::kAdvertiseKeys);
}

Status SecAggServer::close_keys() {
  MutexLock lock(mu_);
  auto* stage = std::get_if<KeysStage>(&current_);
  if (!stage) return out_of_stage(Stage::kAdvertiseKeys);
  public_keys_ = stage->public_keys();
  return enter(std::move(*stage).close());
}

Result<protocol::SecAggGraph> SecAggServer::graph() const {
  MutexLock lock(mu_);
  const auto* stage = std::get_if<SharesStage>(&current_);
  if (!stage) return out_of_stage(Stage::kShareKeys);
  return stage->graph();
}

Result<protocol::SecAggKeyList> SecAggServer::key_list(ClientId client) const {
  MutexLock lock(mu_);
  const auto* stage = std::get_if<SharesStage>(&current_);
  return stage ? stage->key_list(client) : out_of_stage(Stage::kShareKeys);
}

Status SecAggServer::receive_shares(ClientId sender, const protocol::SecAggShares& m) {
  MutexLock lock(mu_);
  auto* stage = std::get_if<SharesStage>(&current_);
  return stage ? stage->receive(sender, m) : out_of_stage(Stage::kShareKeys);
}

Status SecAggServer::close_shares() {
  MutexLock lock(mu_);
  auto* stage = std::get_if<SharesStage>(&current_);
  return stage ? enter(std::move(*stage).close()) : out_of_stage(Stage::kShareKeys);
}

Result<protocol::SecAggForwardedShares> SecAggServer::forwarded_shares(ClientId client) const {
  MutexLock lock(mu_);
  const auto* stage = std::get_if<InputStage>(&current_);
  return stage ? stage->forwarded_shares(client) : out_of_stage(Stage::kMaskedInput);
}

Status SecAggServer::check_masked_input(ClientId sender, const protocol::SecAggMaskedInput& h,
                                        size_t body_bytes) const {
  MutexLock lock(mu_);
  const auto* stage = std::get_if<InputStage>(&current_);
  return stage ? stage->check(sender, h, body_bytes) : out_of_stage(Stage::kMaskedInput);
}

Status SecAggServer::receive_masked_input(ClientId sender, const protocol::SecAggMaskedInput& h,
                                          std::string_view body) {
  MutexLock lock(mu_);
  auto* stage = std::get_if<InputStage>(&current_);
  return stage ? stage->receive(sender, h, body) : out_of_stage(Stage::kMaskedInput);
}

Result<std::vector<ClientId>> SecAggServer::merge_masked_partial(std::string_view bytes) {
  MutexLock lock(mu_);
  auto* stage = std::get_if<InputStage>(&current_);
  if (!stage) return out_of_stage(Stage::kMaskedInput);
  return stage->merge_partial(bytes);
}

Status SecAggServer::close_masked_inputs() {
  MutexLock lock(mu_);
  auto* stage = std::get_if<InputStage>(&current_);
  return stage ? enter(std::move(*stage).close()) : out_of_stage(Stage::kMaskedInput);
}

std::set<ClientId> SecAggServer::survivors() const {
  MutexLock lock(mu_);
  const auto* stage = std::get_if<UnmaskStage>(&current_);
  return stage ? stage->survivors() : std::set<ClientId>();
}

std::set<ClientId> SecAggServer::left_out() const {
  MutexLock lock(mu_);
  const auto* stage = std::get_if<UnmaskStage>(&current_);
  return stage ? stage->left_out() : std::set<ClientId>();
}

Result<protocol::SecAggUnmaskRequest> SecAggServer::unmask_request(ClientId client) const {
  MutexLock lock(mu_);
  const auto* stage = std::get_if<UnmaskStage>(&current_);
  return stage ? stage->unmask_request(client) : out_of_stage(Stage::kUnmask);
}

Status SecAggServer::receive_unmask_response(ClientId sender,
                                             const protocol::SecAggUnmaskResponse& m) {
  MutexLock lock(mu_);
  auto* stage = std::get_if<UnmaskStage>(&current_);
  return stage ? stage->receive(sender, m) : out_of_stage(Stage::kUnmask);
}

Result<SecAggSum> SecAggServer::finish() {
  MutexLock lock(mu_);
  auto* stage = std::get_if<UnmaskStage>(&current_);
  if (!stage) return out_of_stage(Stage::kUnmask);
  Result<SecAggSum> sum = std::move(*stage).finish();
  if (!sum.ok()) return fail(sum.status());
  current_ = Ended{Stage::kDone, ok_status()};
  return sum;
}

std::set<std::string> SecAggServer::public_keys() const {
  MutexLock lock(mu_);
  const auto* stage = std::get_if<KeysStage>(&current_);
  return stage ? stage->public_keys() : public_keys_;
}

std::vector<uint64_t> SecAggServer::masked_sum() const {
  MutexLock lock(mu_);
  const uint32_t bits = round_.setup.params.bits;
  if (const auto* stage = std::get_if<InputStage>(&current_)) return stage->sum().words_mod(bits);
  if (const auto* stage = std::get_if<UnmaskStage>(&current_)) return stage->sum().words_mod(bits);
  return {};
}

size_t SecAggServer::memory_bytes() const {
  MutexLock lock(mu_);
  return std::visit(
      [](const auto& stage) -> size_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(stage)>, Ended>) {
          return 0;
        } else {
          return stage.memory_bytes();
        }
      },
      current_);
}

}  // namespace fedcase::secagg
