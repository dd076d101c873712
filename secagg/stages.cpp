#include "secagg/stages.h"

#include <algorithm>

#include "secagg/params.h"
#include "secagg/quantize.h"

namespace fedcase::secagg {
namespace {

std::string client_name(ClientId c) { return "client " + std::to_string(c); }

template <class T>
std::set<ClientId> ids_of(const std::vector<T>& items) {
  std::set<ClientId> out;
  for (const T& item : items) out.insert(item.client);
  return out;
}

std::vector<ClientId> sorted(const std::set<ClientId>& s) { return {s.begin(), s.end()}; }

template <class Word>
Status remove_masks(std::vector<Word>& sum, const std::vector<MaskStream>& streams,
                    aggregation::WorkerPool& pool) {
  if constexpr (sizeof(Word) == 4) {
    return apply_streams(streams, sum.size(), pool, sum.data());
  } else {
    return apply_streams(streams, sum.size(), 8, pool, sum.data());
  }
}

// The weighted sum (each of the first `length` words read as a signed bits-bit integer times
// `unit`) and the total weight (the last word).
template <class Word>
Status decode(const std::vector<Word>& sum, uint32_t bits, double unit,
              aggregation::WorkerPool& pool, SecAggSum& out) {
  const size_t length = sum.size() - 1;
  out.weighted_sum.resize(length);
  float* values = out.weighted_sum.data();
  FEDCASE_RETURN_IF_ERROR(for_ranges(pool, length, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) values[i] = float(double(to_signed(sum[i], bits)) * unit);
    return ok_status();
  }));
  const uint64_t low_bits = bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
  out.total_weight = double(uint64_t(sum[length]) & low_bits);
  return ok_status();
}

std::set<std::string> public_keys_of(const std::map<ClientId, KeyedRound::Keys>& keys) {
  std::set<std::string> out;
  for (const auto& [client, k] : keys) {
    out.insert(k.cipher_public_key);
    out.insert(k.mask_public_key);
  }
  return out;
}

size_t keys_bytes(const std::map<ClientId, KeyedRound::Keys>& keys) {
  return keys.size() * (sizeof(ClientId) + 2 * protocol::kSecAggKeyBytes);
}

size_t shares_bytes(const std::map<ClientId, SharesIn>& shares) {
  size_t bytes = 0;
  for (const auto& [client, in] : shares) {
    bytes += in.seed_commitment.size();
    for (const auto& [to, ciphertext] : in.ciphertexts) bytes += sizeof(to) + ciphertext.size();
  }
  return bytes;
}

// The stages in order, with the kinds of their messages through the store.
struct StageKinds {
  Stage stage;
  const char* client;
  const char* opening;
};
constexpr StageKinds kStageKinds[] = {
    {Stage::kAdvertiseKeys, stage_kind::kKeys, nullptr},
    {Stage::kShareKeys, stage_kind::kShares, stage_kind::kKeysReply},
    {Stage::kMaskedInput, nullptr, stage_kind::kForwarded},
    {Stage::kUnmask, stage_kind::kUnmask, stage_kind::kUnmaskRequest},
};

}  // namespace

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::kAdvertiseKeys:
      return "advertise_keys";
    case Stage::kShareKeys:
      return "share_keys";
    case Stage::kMaskedInput:
      return "masked_input";
    case Stage::kUnmask:
      return "unmask";
    case Stage::kDone:
      return "done";
    case Stage::kFailed:
      return "failed";
  }
  return "";
}

const char* client_kind(Stage stage) {
  for (const StageKinds& s : kStageKinds) {
    if (s.stage == stage) return s.client;
  }
  return nullptr;
}

const char* opening_kind(Stage stage) {
  for (const StageKinds& s : kStageKinds) {
    if (s.stage == stage) return s.opening;
  }
  return nullptr;
}

Stage stage_reached(const std::function<bool(const char* kind)>& published) {
  Stage reached = Stage::kAdvertiseKeys;
  for (const StageKinds& s : kStageKinds) {
    if (s.opening && published(s.opening)) reached = s.stage;
  }
  return reached;
}

Status RoundIdentity::check(ClientId sender, ClientId named, JobId message_job,
                            RoundIndex message_round) const {
  if (named != sender) {
    return permission_denied("the message names " + client_name(named) + " but comes from " +
                             client_name(sender));
  }
  if (message_job != job || message_round != round) {
    return permission_denied("the message belongs to job " + std::to_string(message_job) +
                             " round " + std::to_string(message_round) + ", not job " +
                             std::to_string(job) + " round " + std::to_string(round));
  }
  if (invitees.count(sender) == 0) {
    return permission_denied(client_name(sender) + " is not invited to round " +
                             std::to_string(round) + " of job " + std::to_string(job));
  }
  return ok_status();
}

Result<std::vector<float>> SecAggSum::mean() const {
  if (!(total_weight > 0)) return conflict("the sum has no weight");
  std::vector<float> out(weighted_sum.size());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<float>(double(weighted_sum[i]) / total_weight);
  }
  return out;
}

// ---- kAdvertiseKeys ----

KeysStage::KeysStage(const RoundContext& round) : round_(&round) {}

Status KeysStage::receive(ClientId sender, const protocol::SecAggAdvertiseKeys& m) {
  const SecAggRoundSetup& setup = round_->setup;
  FEDCASE_RETURN_IF_ERROR(round_->identity.check(sender, m.client, m.job, m.round));
  if (keys_.count(sender) != 0) return conflict(client_name(sender) + " already advertised keys");
  for (const std::string* key : {&m.cipher_public_key, &m.mask_public_key}) {
    if (key->size() != protocol::kSecAggKeyBytes) {
      return invalid_argument("a public key must hold 32 bytes");
    }
    if (setup.used_public_keys.count(*key) != 0) {
      return permission_denied(client_name(sender) + " replays a public key of an earlier round");
    }
    if (round_keys_.count(*key) != 0) {
      return permission_denied(client_name(sender) + " advertises a public key already in use");
    }
    if (!round_->probe_key.agree(to_bytes32(*key)).ok()) {
      return invalid_argument(client_name(sender) + " advertises a low-order public key");
    }
  }
  if (m.cipher_public_key == m.mask_public_key) {
    return invalid_argument("the cipher and mask public keys must differ");
  }
  auto signing_key = setup.signing_keys.find(sender);
  if (signing_key == setup.signing_keys.end() || signing_key->second.empty()) {
    return permission_denied(client_name(sender) +
                             " registered no signing key: secure rounds need an SDK that signs "
                             "its keys");
  }
  FEDCASE_RETURN_IF_ERROR(check_keys_signature(setup.job, setup.round, sender,
                                               m.cipher_public_key, m.mask_public_key,
                                               signing_key->second, m.signature));
  keys_[sender] = {m.cipher_public_key, m.mask_public_key, m.signature};
  round_keys_.insert(m.cipher_public_key);
  round_keys_.insert(m.mask_public_key);
  return ok_status();
}

Result<SharesStage> KeysStage::close() && {
  protocol::SecAggParams params = round_->setup.params;
  std::vector<ClientId> participants;
  for (const auto& [client, keys] : keys_) participants.push_back(client);
  const size_t n = participants.size();
  if (n < size_t(params.threshold) + 1) {
    return conflict(std::to_string(n) + " clients advertised keys; a threshold of " +
                    std::to_string(params.threshold) + " needs at least " +
                    std::to_string(params.threshold + 1));
  }
  if (params.degree >= n - 1 || params.degree + 1 == round_->identity.invitees.size()) {
    params.degree = static_cast<uint32_t>(n - 1);
  }
  Result<NeighbourGraph> graph =
      NeighbourGraph::draw(participants, params.degree, round_->setup.graph_seed);
  if (!graph.ok()) return conflict("the neighbour graph: " + graph.status().message());
  return SharesStage(*round_, KeyedRound{params, std::move(keys_), std::move(*graph)});
}

std::set<std::string> KeysStage::public_keys() const { return round_keys_; }

size_t KeysStage::memory_bytes() const { return keys_bytes(keys_); }

// ---- kShareKeys ----

SharesStage::SharesStage(const RoundContext& round, KeyedRound keyed)
    : round_(&round), keyed_(std::move(keyed)) {}

protocol::SecAggGraph SharesStage::graph() const {
  const SecAggRoundSetup& setup = round_->setup;
  return protocol::SecAggGraph{setup.job, setup.round, keyed_.params,
                               std::string(as_view(setup.graph_seed)),
                               keyed_.graph.participants()};
}

Result<protocol::SecAggKeyList> SharesStage::key_list(ClientId client) const {
  if (!keyed_.graph.contains(client)) {
    return permission_denied(client_name(client) + " is not a participant of the round");
  }
  protocol::SecAggKeyList list;
  list.job = round_->setup.job;
  list.round = round_->setup.round;
  for (ClientId c : keyed_.graph.neighbours(client)) {
    const KeyedRound::Keys& k = keyed_.keys.at(c);
    list.neighbours.push_back({c, k.cipher_public_key, k.mask_public_key,
                               round_->setup.signing_keys.at(c), k.signature});
  }
  return list;
}

std::set<std::string> SharesStage::public_keys() const { return public_keys_of(keyed_.keys); }

Status SharesStage::receive(ClientId sender, const protocol::SecAggShares& m) {
  FEDCASE_RETURN_IF_ERROR(round_->identity.check(sender, m.client, m.job, m.round));
  if (!keyed_.graph.contains(sender)) {
    return permission_denied(client_name(sender) + " did not advertise keys in time");
  }
  if (shares_.count(sender) != 0) return conflict(client_name(sender) + " already sent shares");
  if (m.seed_commitment.size() != protocol::kSecAggKeyBytes) {
    return invalid_argument("the seed commitment must hold 32 bytes");
  }
  const std::vector<ClientId>& neighbours = keyed_.graph.neighbours(sender);
  if (sorted(ids_of(m.shares)) != neighbours || m.shares.size() != neighbours.size()) {
    return invalid_argument(client_name(sender) + " must send exactly one share to each of its " +
                            std::to_string(neighbours.size()) + " neighbours");
  }
  SharesIn in;
  in.seed_commitment = m.seed_commitment;
  for (const protocol::SecAggCiphertext& c : m.shares) {
    if (c.ciphertext.size() != kShareCiphertextBytes) {
      return invalid_argument("a share ciphertext must hold " +
                              std::to_string(kShareCiphertextBytes) + " bytes");
    }
    in.ciphertexts[c.client] = c.ciphertext;
  }
  shares_[sender] = std::move(in);
  return ok_status();
}

Result<InputStage> SharesStage::close() && {
  if (shares_.size() < keyed_.params.threshold) {
    return conflict(std::to_string(shares_.size()) +
                    " clients sent shares, fewer than the threshold " +
                    std::to_string(keyed_.params.threshold));
  }
  return InputStage(*round_, std::move(keyed_), std::move(shares_));
}

size_t SharesStage::memory_bytes() const {
  return keys_bytes(keyed_.keys) + keyed_.graph.memory_bytes() + shares_bytes(shares_);
}

// ---- kMaskedInput ----

namespace {

// Each sharer with the neighbours that shared (whose shares it is forwarded).
MaskedInputs::Roster roster_of(const NeighbourGraph& graph,
                               const std::map<ClientId, SharesIn>& shares) {
  MaskedInputs::Roster out;
  for (const auto& [client, in] : shares) {
    std::set<ClientId>& from = out[client];
    for (ClientId n : graph.neighbours(client)) {
      if (shares.count(n) != 0) from.insert(n);
    }
  }
  return out;
}

}  // namespace

InputStage::InputStage(const RoundContext& round, KeyedRound keyed,
                       std::map<ClientId, SharesIn> shares)
    : round_(&round),
      keyed_(std::move(keyed)),
      shares_(std::move(shares)),
      inputs_(roster_of(keyed_.graph, shares_), keyed_.params.vector_length + 1,
              round.word_bytes, round.max_held, round.pool) {}

Result<protocol::SecAggForwardedShares> InputStage::forwarded_shares(ClientId client) const {
  auto sharer = inputs_.roster().find(client);
  if (sharer == inputs_.roster().end()) {
    return permission_denied(client_name(client) + " did not complete the share stage");
  }
  protocol::SecAggForwardedShares out;
  out.job = round_->setup.job;
  out.round = round_->setup.round;
  for (ClientId from : sharer->second) {
    out.shares.push_back({from, shares_.at(from).ciphertexts.at(client)});
  }
  return out;
}

std::set<std::string> InputStage::public_keys() const { return public_keys_of(keyed_.keys); }

Status InputStage::check(ClientId sender, const protocol::SecAggMaskedInput& h,
                         size_t body_bytes) const {
  FEDCASE_RETURN_IF_ERROR(round_->identity.check(sender, h.client, h.job, h.round));
  return inputs_.check(sender, h, body_bytes);
}

Status InputStage::receive(ClientId sender, const protocol::SecAggMaskedInput& h,
                           std::string_view body) {
  FEDCASE_RETURN_IF_ERROR(round_->identity.check(sender, h.client, h.job, h.round));
  return inputs_.take(sender, h, body);
}

Result<std::vector<ClientId>> InputStage::merge_partial(std::string_view bytes) {
  return inputs_.merge(bytes);
}

Result<UnmaskStage> InputStage::close() && {
  Result<MaskedInputs::Decided> decided = std::move(inputs_).decide();
  if (!decided.ok()) return decided.status();
  return UnmaskStage::open(*round_, std::move(keyed_), std::move(shares_),
                           std::move(decided).value());
}

size_t InputStage::memory_bytes() const {
  return keys_bytes(keyed_.keys) + keyed_.graph.memory_bytes() + shares_bytes(shares_) +
         inputs_.memory_bytes();
}

// ---- kUnmask ----

UnmaskStage::UnmaskStage(const RoundContext& round, KeyedRound keyed,
                         std::map<ClientId, SharesIn> shares, MaskedInputs::Decided inputs)
    : round_(&round),
      keyed_(std::move(keyed)),
      shares_(std::move(shares)),
      inputs_(std::move(inputs)) {
  for (const auto& [client, in] : shares_) {
    if (inputs_.survivors.count(client) == 0) dropped_.insert(client);
  }
}

Result<UnmaskStage> UnmaskStage::open(const RoundContext& round, KeyedRound keyed,
                                      std::map<ClientId, SharesIn> shares,
                                      MaskedInputs::Decided decided) {
  UnmaskStage stage(round, std::move(keyed), std::move(shares), std::move(decided));
  const std::set<ClientId>& survivors = stage.inputs_.survivors;
  const uint32_t t = stage.keyed_.params.threshold;
  if (survivors.size() < t) {
    return conflict(std::to_string(survivors.size()) +
                    " clients sent their masked input, fewer than the threshold " +
                    std::to_string(t));
  }
  // A survivor's seed, and a dropped client's key when a survivor masked with it, must be held
  // by t survivors (those that hold its share: the others refused it and did not mask with it).
  for (const auto& [owner, in] : stage.shares_) {
    const bool survived = survivors.count(owner) != 0;
    const std::vector<ClientId> can_answer = stage.holders(owner, survivors);
    if ((survived || !can_answer.empty()) && can_answer.size() < t) {
      return conflict(client_name(owner) + (survived ? "'s self-mask seed" : "'s mask key") +
                      " is held by " + std::to_string(can_answer.size()) +
                      " clients that sent their input, fewer than the threshold " +
                      std::to_string(t));
    }
  }
  for (ClientId c : survivors) {
    protocol::SecAggUnmaskRequest request;
    request.job = round.setup.job;
    request.round = round.setup.round;
    for (ClientId peer : stage.holders_of_shares_from(c)) {
      (survivors.count(peer) != 0 ? request.survivors : request.dropped).push_back(peer);
    }
    stage.requests_[c] = std::move(request);
  }
  return stage;
}

std::vector<ClientId> UnmaskStage::holders(ClientId owner,
                                           const std::set<ClientId>& candidates) const {
  std::vector<ClientId> out;
  auto refused = inputs_.refusers.find(owner);
  for (ClientId c : keyed_.graph.neighbours(owner)) {
    if (candidates.count(c) == 0) continue;
    if (refused != inputs_.refusers.end() && refused->second.count(c) != 0) continue;
    out.push_back(c);
  }
  return out;
}

std::vector<ClientId> UnmaskStage::holders_of_shares_from(ClientId holder) const {
  std::vector<ClientId> out;
  for (ClientId peer : keyed_.graph.neighbours(holder)) {
    if (shares_.count(peer) == 0) continue;  // never shared: nothing to reveal
    auto refused = inputs_.refusers.find(peer);
    if (refused != inputs_.refusers.end() && refused->second.count(holder) != 0) continue;
    out.push_back(peer);
  }
  return out;
}

Result<protocol::SecAggUnmaskRequest> UnmaskStage::unmask_request(ClientId client) const {
  auto it = requests_.find(client);
  if (it == requests_.end()) {
    return permission_denied(client_name(client) + " did not send its masked input");
  }
  return it->second;
}

std::set<std::string> UnmaskStage::public_keys() const { return public_keys_of(keyed_.keys); }

Status UnmaskStage::receive(ClientId sender, const protocol::SecAggUnmaskResponse& m) {
  FEDCASE_RETURN_IF_ERROR(round_->identity.check(sender, m.client, m.job, m.round));
  auto request = requests_.find(sender);
  if (request == requests_.end()) {
    return permission_denied(client_name(sender) + " did not send its masked input");
  }
  if (responded_.count(sender) != 0) return conflict(client_name(sender) + " already answered");
  const protocol::SecAggUnmaskRequest& asked = request->second;
  if (sorted(ids_of(m.seed_shares)) != asked.survivors ||
      sorted(ids_of(m.key_shares)) != asked.dropped) {
    return invalid_argument(client_name(sender) + " must answer exactly the shares asked for");
  }
  const uint32_t x = keyed_.graph.index_of(sender);
  std::vector<std::pair<ClientId, ShamirShare>> seeds, keys;
  for (auto [list, out] : {std::pair{&m.seed_shares, &seeds}, std::pair{&m.key_shares, &keys}}) {
    for (const protocol::SecAggShare& s : *list) {
      Result<ShamirShare> share = decode_share(s.share);
      if (!share.ok()) return share.status();
      if (share->x != x) return invalid_argument("a share of another holder");
      out->push_back({s.client, *share});
    }
  }
  for (const auto& [owner, share] : seeds) seed_shares_[owner].push_back(share);
  for (const auto& [owner, share] : keys) key_shares_[owner].push_back(share);
  responded_.insert(sender);
  return ok_status();
}

Result<Bytes32> UnmaskStage::recover(ClientId owner, const std::vector<ShamirShare>& shares,
                                     const char* what,
                                     const std::function<bool(const Bytes32&)>& matches,
                                     std::set<ClientId>& wrong) const {
  const uint32_t t = keyed_.params.threshold;
  if (shares.size() < t) {
    return conflict(client_name(owner) + "'s " + what + ": " + std::to_string(shares.size()) +
                    " shares arrived, the threshold is " + std::to_string(t));
  }
  Result<Recovered> found = shamir_recover(shares, t, matches);
  if (!found.ok()) {
    return conflict(client_name(owner) + "'s " + what +
                    ": no threshold of the shares that arrived matches its commitment (" +
                    found.status().message() + ")");
  }
  for (size_t i : found->wrong) wrong.insert(keyed_.graph.participants().at(shares[i].x - 1));
  return found->secret;
}

Result<std::vector<MaskStream>> UnmaskStage::plan_unmasking(std::set<ClientId>& wrong) const {
  const SecAggRoundSetup& setup = round_->setup;
  const auto shares_of = [](const std::map<ClientId, std::vector<ShamirShare>>& all,
                            ClientId owner) {
    auto it = all.find(owner);
    return it == all.end() ? std::vector<ShamirShare>() : it->second;
  };
  std::vector<MaskStream> streams;
  for (ClientId i : inputs_.survivors) {
    const std::string& commitment = shares_.at(i).seed_commitment;
    Result<Bytes32> seed = recover(
        i, shares_of(seed_shares_, i), "self-mask seed",
        [&](const Bytes32& s) {
          return std::string(as_view(seed_commitment(setup.job, setup.round, i, s))) ==
                 commitment;
        },
        wrong);
    if (!seed.ok()) return seed.status();
    Result<PrgKey> key = prg_key(*seed);
    if (!key.ok()) return key.status();
    streams.push_back({*key, PrgExpander::Op::kSubtract});
  }
  for (ClientId j : dropped_) {
    const std::vector<ClientId> masked_with = holders(j, inputs_.survivors);
    if (masked_with.empty()) continue;
    const std::string& public_key = keyed_.keys.at(j).mask_public_key;
    Result<Bytes32> raw = recover(
        j, shares_of(key_shares_, j), "mask key",
        [&](const Bytes32& k) {
          Result<Bytes32> pub = public_key_of(k);
          return pub.ok() && std::string(as_view(*pub)) == public_key;
        },
        wrong);
    if (!raw.ok()) return raw.status();
    Result<X25519Key> key = X25519Key::load(*raw);
    if (!key.ok()) return key.status();
    for (ClientId i : masked_with) {
      Result<Bytes32> seed = pairwise_seed(*key, to_bytes32(keyed_.keys.at(i).mask_public_key),
                                           setup.job, setup.round, j, i);
      if (!seed.ok()) return seed.status();
      Result<PrgKey> prg = prg_key(*seed);
      if (!prg.ok()) return prg.status();
      // Survivor i applied pairwise_op(i, j); removing it applies the opposite.
      const bool added = pairwise_op(i, j) == PrgExpander::Op::kAdd;
      streams.push_back({*prg, added ? PrgExpander::Op::kSubtract : PrgExpander::Op::kAdd});
    }
  }
  return streams;
}

Result<SecAggSum> UnmaskStage::finish() && {
  std::set<ClientId> wrong;
  Result<std::vector<MaskStream>> streams = plan_unmasking(wrong);
  if (!streams.ok()) return streams.status();
  SecAggSum out;
  const protocol::SecAggParams& params = keyed_.params;
  const double unit = double(params.max_weight) / params.scale;
  FEDCASE_RETURN_IF_ERROR(inputs_.sum.visit([&](auto& sum) {
    FEDCASE_RETURN_IF_ERROR(remove_masks(sum, *streams, round_->pool));
    return decode(sum, params.bits, unit, round_->pool, out);
  }));
  out.survivors = sorted(inputs_.survivors);
  out.dropped = sorted(dropped_);
  out.left_out = sorted(inputs_.left_out);
  out.wrong_shares = sorted(wrong);
  return out;
}

size_t UnmaskStage::memory_bytes() const {
  size_t bytes = keys_bytes(keyed_.keys) + keyed_.graph.memory_bytes() + shares_bytes(shares_) +
                 inputs_.sum.memory_bytes();
  for (const auto* shares : {&seed_shares_, &key_shares_}) {
    for (const auto& [owner, list] : *shares) bytes += list.size() * sizeof(ShamirShare);
  }
  return bytes;
}

}  // namespace fedcase::secagg
