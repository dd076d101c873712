#include "secagg/server.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "secagg/params.h"
#include "secagg/partial.h"
#include "secagg/quantize.h"

namespace fedcase::secagg {
namespace {

const char* stage_name(SecAggServer::Stage stage) {
  switch (stage) {
    case SecAggServer::Stage::kAdvertiseKeys:
      return "advertise keys";
    case SecAggServer::Stage::kShareKeys:
      return "share keys";
    case SecAggServer::Stage::kMaskedInput:
      return "masked input";
    case SecAggServer::Stage::kUnmask:
      return "unmask";
    case SecAggServer::Stage::kDone:
      return "done";
    case SecAggServer::Stage::kFailed:
      return "failed";
  }
  return "";
}

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

}  // namespace

Result<std::vector<float>> SecAggSum::mean() const {
  if (!(total_weight > 0)) return conflict("the sum has no weight");
  std::vector<float> out(weighted_sum.size());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<float>(double(weighted_sum[i]) / total_weight);
  }
  return out;
}

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
    : setup_(std::move(setup)),
      invitees_(setup_.invitees.begin(), setup_.invitees.end()),
      probe_key_(std::move(probe_key)),
      word_bytes_(word_bytes(setup_.params.bits)),
      max_held_(max_held_inputs(setup_.params.degree)),
      pool_(std::make_unique<aggregation::WorkerPool>(setup_.threads)) {
  MutexLock lock(mu_);
  params_ = setup_.params;
}

SecAggServer::Stage SecAggServer::stage() const {
  MutexLock lock(mu_);
  return stage_;
}

Status SecAggServer::failure() const {
  MutexLock lock(mu_);
  return failure_;
}

protocol::SecAggParams SecAggServer::params() const {
  MutexLock lock(mu_);
  return params_;
}

Status SecAggServer::fail(std::string reason) {
  stage_ = Stage::kFailed;
  failure_ = conflict("secure aggregation of job " + std::to_string(setup_.job) + " round " +
                      std::to_string(setup_.round) + " failed: " + reason);
  free_sum();
  return failure_;
}

void SecAggServer::free_sum() {
  std::vector<uint32_t>().swap(sum32_);  // clear() would keep the capacity
  std::vector<uint64_t>().swap(sum64_);
}

Status SecAggServer::check_message(Stage stage, ClientId sender, ClientId named, JobId job,
                                   RoundIndex round) const {
  if (stage_ == Stage::kFailed) return failure_;
  if (stage_ != stage) {
    return conflict(std::string("a ") + stage_name(stage) + " message in the " +
                    stage_name(stage_) + " stage");
  }
  if (named != sender) {
    return permission_denied("the message names " + client_name(named) + " but comes from " +
                             client_name(sender));
  }
  if (job != setup_.job || round != setup_.round) {
    return permission_denied("the message belongs to job " + std::to_string(job) + " round " +
                             std::to_string(round) + ", not job " + std::to_string(setup_.job) +
                             " round " + std::to_string(setup_.round));
  }
  if (invitees_.count(sender) == 0) {
    return permission_denied(client_name(sender) + " is not invited to this round");
  }
  return ok_status();
}

// Stage 1: advertise keys.

Status SecAggServer::receive_keys(ClientId sender, const protocol::SecAggAdvertiseKeys& m) {
  MutexLock lock(mu_);
  FEDCASE_RETURN_IF_ERROR(check_message(Stage::kAdvertiseKeys, sender, m.client, m.job, m.round));
  if (keys_.count(sender) != 0) return conflict(client_name(sender) + " already advertised keys");
  for (const std::string* key : {&m.cipher_public_key, &m.mask_public_key}) {
    if (key->size() != protocol::kSecAggKeyBytes) {
      return invalid_argument("a public key must hold 32 bytes");
    }
    if (setup_.used_public_keys.count(*key) != 0) {
      return permission_denied(client_name(sender) + " replays a public key of an earlier round");
    }
    if (round_keys_.count(*key) != 0) {
      return permission_denied(client_name(sender) + " advertises a public key already in use");
    }
    if (!probe_key_.agree(to_bytes32(*key)).ok()) {
      return invalid_argument(client_name(sender) + " advertises a low-order public key");
    }
  }
  if (m.cipher_public_key == m.mask_public_key) {
    return invalid_argument("the cipher and mask public keys must differ");
  }
  auto signing_key = setup_.signing_keys.find(sender);
  if (signing_key == setup_.signing_keys.end() || signing_key->second.empty()) {
    return permission_denied(client_name(sender) +
                             " registered no signing key: secure rounds need an SDK that signs "
                             "its keys");
  }
  FEDCASE_RETURN_IF_ERROR(check_keys_signature(setup_.job, setup_.round, sender,
                                               m.cipher_public_key, m.mask_public_key,
                                               signing_key->second, m.signature));
  keys_[sender] = {m.cipher_public_key, m.mask_public_key, m.signature};
  round_keys_.insert(m.cipher_public_key);
  round_keys_.insert(m.mask_public_key);
  return ok_status();
}

Status SecAggServer::close_keys() {
  MutexLock lock(mu_);
  if (stage_ != Stage::kAdvertiseKeys) return conflict("the keys stage is not open");
  std::vector<ClientId> participants;
  for (const auto& [client, keys] : keys_) participants.push_back(client);
  const size_t n = participants.size();
  if (n < size_t(params_.threshold) + 1) {
    return fail(std::to_string(n) + " clients advertised keys; a threshold of " +
                std::to_string(params_.threshold) + " needs at least " +
                std::to_string(params_.threshold + 1));
  }
  if (params_.degree >= n - 1 || params_.degree + 1 == invitees_.size()) {
    params_.degree = static_cast<uint32_t>(n - 1);
  }
  Result<NeighbourGraph> graph =
      NeighbourGraph::draw(participants, params_.degree, setup_.graph_seed);
  if (!graph.ok()) return fail("the neighbour graph: " + graph.status().message());
  graph_ = std::move(*graph);
  stage_ = Stage::kShareKeys;
  return ok_status();
}

Result<protocol::SecAggGraph> SecAggServer::graph() const {
  MutexLock lock(mu_);
  if (stage_ == Stage::kFailed) return failure_;
  if (!graph_) return conflict("the graph is drawn when the keys stage closes");
  return protocol::SecAggGraph{setup_.job, setup_.round, params_,
                               std::string(as_view(setup_.graph_seed)), graph_->participants()};
}

Result<protocol::SecAggKeyList> SecAggServer::key_list(ClientId client) const {
  MutexLock lock(mu_);
  if (stage_ == Stage::kFailed) return failure_;
  if (!graph_) return conflict("the key list is drawn when the keys stage closes");
  if (!graph_->contains(client)) {
    return permission_denied(client_name(client) + " is not a participant of the round");
  }
  protocol::SecAggKeyList list;
  list.job = setup_.job;
  list.round = setup_.round;
  for (ClientId c : graph_->neighbours(client)) {
    const Keys& k = keys_.at(c);
    list.neighbours.push_back(
        {c, k.cipher_public_key, k.mask_public_key, setup_.signing_keys.at(c), k.signature});
  }
  return list;
}

// Stage 2: share keys.

Status SecAggServer::receive_shares(ClientId sender, const protocol::SecAggShares& m) {
  MutexLock lock(mu_);
  FEDCASE_RETURN_IF_ERROR(check_message(Stage::kShareKeys, sender, m.client, m.job, m.round));
  if (!graph_->contains(sender)) {
    return permission_denied(client_name(sender) + " did not advertise keys in time");
  }
  if (shares_.count(sender) != 0) return conflict(client_name(sender) + " already sent shares");
  if (m.seed_commitment.size() != protocol::kSecAggKeyBytes) {
    return invalid_argument("the seed commitment must hold 32 bytes");
  }
  const std::vector<ClientId>& neighbours = graph_->neighbours(sender);
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

Status SecAggServer::close_shares() {
  MutexLock lock(mu_);
  if (stage_ != Stage::kShareKeys) return conflict("the share stage is not open");
  if (shares_.size() < params_.threshold) {
    return fail(std::to_string(shares_.size()) + " clients sent shares, fewer than the threshold " +
                std::to_string(params_.threshold));
  }
  const size_t words = params_.vector_length + 1;
  with_sum([words](auto& sum) { sum.assign(words, 0); });
  stage_ = Stage::kMaskedInput;
  return ok_status();
}

Result<protocol::SecAggForwardedShares> SecAggServer::forwarded_shares(ClientId client) const {
  MutexLock lock(mu_);
  if (stage_ == Stage::kFailed) return failure_;
  if (stage_ < Stage::kMaskedInput) return conflict("shares are forwarded when the stage closes");
  if (shares_.count(client) == 0) {
    return permission_denied(client_name(client) + " did not complete the share stage");
  }
  protocol::SecAggForwardedShares out;
  out.job = setup_.job;
  out.round = setup_.round;
  for (ClientId from : graph_->neighbours(client)) {
    auto it = shares_.find(from);
    if (it != shares_.end()) out.shares.push_back({from, it->second.ciphertexts.at(client)});
  }
  return out;
}

// Stage 3: masked input.

Status SecAggServer::check_input(ClientId sender, const protocol::SecAggMaskedInput& h,
                                 size_t body_bytes) const {
  FEDCASE_RETURN_IF_ERROR(check_message(Stage::kMaskedInput, sender, h.client, h.job, h.round));
  FEDCASE_RETURN_IF_ERROR(check_sender(sender));
  if (h.words != params_.vector_length + 1 || h.word_bytes != word_bytes(params_.bits)) {
    return unprocessable("the masked vector must hold " +
                         std::to_string(params_.vector_length + 1) + " words of " +
                         std::to_string(word_bytes(params_.bits)) + " bytes");
  }
  FEDCASE_RETURN_IF_ERROR(protocol::check_masked_vector(h, body_bytes));
  FEDCASE_RETURN_IF_ERROR(check_refused_neighbours(sender, h.refused_shares));
  return check_room_to_hold(sender, h.refused_shares, refused_by_held_, held_.size(), max_held_);
}

Status SecAggServer::check_sender(ClientId sender) const {
  if (shares_.count(sender) == 0) {
    return permission_denied(client_name(sender) + " did not complete the share stage");
  }
  if (survivors_.count(sender) != 0 || held_.count(sender) != 0) {
    return conflict(client_name(sender) + " already sent its masked input");
  }
  return ok_status();
}

Status SecAggServer::check_refused_neighbours(ClientId sender,
                                              const std::vector<ClientId>& refused_shares) const {
  for (ClientId refused : refused_shares) {
    if (!graph_->adjacent(sender, refused) || shares_.count(refused) == 0) {
      return invalid_argument(client_name(sender) + " refuses the share of " +
                              client_name(refused) + ", which it was not forwarded");
    }
  }
  return ok_status();
}

void SecAggServer::hold(HeldInput input) {
  refused_by_held_.insert(input.refused.begin(), input.refused.end());
  const ClientId client = input.client;
  held_.emplace(client, std::move(input));
}

Status SecAggServer::check_masked_input(ClientId sender, const protocol::SecAggMaskedInput& h,
                                        size_t body_bytes) const {
  MutexLock lock(mu_);
  return check_input(sender, h, body_bytes);
}

Status SecAggServer::receive_masked_input(ClientId sender, const protocol::SecAggMaskedInput& h,
                                          std::string_view body) {
  MutexLock lock(mu_);
  FEDCASE_RETURN_IF_ERROR(check_input(sender, h, body.size()));
  if (must_hold(sender, h.refused_shares, refused_by_held_)) {
    hold({sender, h.refused_shares, std::string(body)});
    return ok_status();
  }
  FEDCASE_RETURN_IF_ERROR(with_sum([&](auto& sum) { return fold_words(sum, body, word_bytes_, *pool_); }));
  survivors_.insert(sender);
  return ok_status();
}

Result<std::vector<ClientId>> SecAggServer::merge_masked_partial(std::string_view bytes) {
  MutexLock lock(mu_);
  if (stage_ != Stage::kMaskedInput) return conflict("the masked input stage is not open");
  auto partial = decode_masked_partial(bytes, params_.vector_length + 1, word_bytes_, max_held_);
  if (!partial.ok()) return partial.status();
  // The inputs in its sum refused no share and no input before them refused theirs: only a
  // sender that sent another input (which no replica lets through) can stop them, and then
  // the sum changes nothing.
  for (ClientId sender : partial->folded) FEDCASE_RETURN_IF_ERROR(check_sender(sender));
  FEDCASE_RETURN_IF_ERROR(
      with_sum([&](auto& sum) { return fold_words(sum, partial->sum, word_bytes_, *pool_); }));
  survivors_.insert(partial->folded.begin(), partial->folded.end());
  std::vector<ClientId> senders = partial->folded;
  // Each held input is taken or refused alone, as if it came here.
  for (HeldInput& input : partial->held) {
    const ClientId sender = input.client;
    // A partial's held input is held here too, whatever this server saw: room is needed.
    if (!check_sender(sender).ok() || !check_refused_neighbours(sender, input.refused).ok() ||
        held_.size() >= max_held_) {
      continue;
    }
    hold(std::move(input));
    senders.push_back(sender);
  }
  return senders;
}

std::set<ClientId> leave_out(const std::set<ClientId>& folded,
                             const std::map<ClientId, HeldInput>& held) {
  std::set<ClientId> present = folded, out;
  for (const auto& input : held) present.insert(input.first);
  for (;;) {
    // The conflicts left: a held input that refused the share of a present one.
    std::map<ClientId, size_t> conflicts, refused;  // by held input in a conflict
    std::set<ClientId> against_folded;  // in a conflict with an input of the sum
    for (const auto& [client, input] : held) {
      if (present.count(client) == 0) continue;
      for (ClientId other : input.refused) {
        if (present.count(other) == 0) continue;
        ++conflicts[client];
        if (held.count(other) != 0) {
          ++conflicts[other];
          ++refused[other];
        } else {
          against_folded.insert(client);
        }
      }
    }
    if (conflicts.empty()) return out;
    // Leave out the one that must go (its conflict is with an input already summed), else
    // the one in most conflicts, else the one refused most, else the smallest id.
    const auto rank = [&](ClientId c) {
      return std::make_tuple(against_folded.count(c), conflicts[c], refused[c]);
    };
    ClientId worst = conflicts.begin()->first;
    for (const auto& entry : conflicts) {
      if (rank(entry.first) > rank(worst)) worst = entry.first;
    }
    out.insert(worst);
    present.erase(worst);
  }
}

Status SecAggServer::admit_held() {
  left_out_ = leave_out(survivors_, held_);
  for (const auto& entry : held_) {
    const HeldInput& input = entry.second;
    if (left_out_.count(input.client) != 0) continue;
    FEDCASE_RETURN_IF_ERROR(
        with_sum([&](auto& sum) { return fold_words(sum, input.body, word_bytes_, *pool_); }));
    survivors_.insert(input.client);
    for (ClientId refused : input.refused) refusers_[refused].insert(input.client);
  }
  held_.clear();
  refused_by_held_.clear();
  return ok_status();
}

std::vector<ClientId> SecAggServer::holders(ClientId owner,
                                            const std::set<ClientId>& candidates) const {
  std::vector<ClientId> out;
  auto refused = refusers_.find(owner);
  for (ClientId c : graph_->neighbours(owner)) {
    if (candidates.count(c) == 0) continue;
    if (refused != refusers_.end() && refused->second.count(c) != 0) continue;
    out.push_back(c);
  }
  return out;
}

Status SecAggServer::close_masked_inputs() {
  MutexLock lock(mu_);
  if (stage_ != Stage::kMaskedInput) return conflict("the masked input stage is not open");
  FEDCASE_RETURN_IF_ERROR(admit_held());
  const uint32_t t = params_.threshold;
  if (survivors_.size() < t) {
    return fail(std::to_string(survivors_.size()) +
                " clients sent their masked input, fewer than the threshold " + std::to_string(t));
  }
  for (const auto& [client, shares] : shares_) {
    if (survivors_.count(client) == 0) dropped_.insert(client);
  }
  // Every survivor's seed and every dropped client's key (when a survivor masked with it)
  // must be held by t survivors.
  for (const auto& [owner, shares] : shares_) {
    // A survivor's seed, and a dropped client's key when a survivor masked with it (the
    // survivors that hold its share: the others refused it and did not mask with it).
    const bool survived = survivors_.count(owner) != 0;
    const std::vector<ClientId> can_answer = holders(owner, survivors_);
    if ((survived || !can_answer.empty()) && can_answer.size() < t) {
      return fail(client_name(owner) + (survived ? "'s self-mask seed" : "'s mask key") +
                  " is held by " + std::to_string(can_answer.size()) +
                  " clients that sent their input, fewer than the threshold " + std::to_string(t));
    }
  }
  for (ClientId c : survivors_) {
    protocol::SecAggUnmaskRequest request;
    request.job = setup_.job;
    request.round = setup_.round;
    for (ClientId peer : graph_->neighbours(c)) {
      if (shares_.count(peer) == 0) continue;  // never shared: nothing to reveal
      auto refused = refusers_.find(peer);
      if (refused != refusers_.end() && refused->second.count(c) != 0) continue;
      (survivors_.count(peer) != 0 ? request.survivors : request.dropped).push_back(peer);
    }
    requests_[c] = std::move(request);
  }
  stage_ = Stage::kUnmask;
  return ok_status();
}

std::set<ClientId> SecAggServer::survivors() const {
  MutexLock lock(mu_);
  return survivors_;
}

std::set<ClientId> SecAggServer::left_out() const {
  MutexLock lock(mu_);
  return left_out_;
}

Result<protocol::SecAggUnmaskRequest> SecAggServer::unmask_request(ClientId client) const {
  MutexLock lock(mu_);
  if (stage_ == Stage::kFailed) return failure_;
  if (stage_ < Stage::kUnmask) return conflict("unmask requests are built when inputs close");
  auto it = requests_.find(client);
  if (it == requests_.end()) {
    return permission_denied(client_name(client) + " did not send its masked input");
  }
  return it->second;
}

// Stage 4: unmask.

Status SecAggServer::receive_unmask_response(ClientId sender,
                                             const protocol::SecAggUnmaskResponse& m) {
  MutexLock lock(mu_);
  FEDCASE_RETURN_IF_ERROR(check_message(Stage::kUnmask, sender, m.client, m.job, m.round));
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
  const uint32_t x = graph_->index_of(sender);
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

Result<Bytes32> SecAggServer::recover(ClientId owner, const std::vector<ShamirShare>& shares,
                                      const char* what,
                                      const std::function<bool(const Bytes32&)>& matches,
                                      std::set<ClientId>& wrong) const {
  const uint32_t t = params_.threshold;
  if (shares.size() < t) {
    return invalid_argument(client_name(owner) + "'s " + what + ": " +
                            std::to_string(shares.size()) + " shares arrived, the threshold is " +
                            std::to_string(t));
  }
  Result<Recovered> found = shamir_recover(shares, t, matches);
  if (!found.ok()) {
    return invalid_argument(client_name(owner) + "'s " + what +
                            ": no threshold of the shares that arrived matches its commitment (" +
                            found.status().message() + ")");
  }
  for (size_t i : found->wrong) wrong.insert(graph_->participants().at(shares[i].x - 1));
  return found->secret;
}

Result<std::vector<MaskStream>> SecAggServer::plan_unmasking(std::set<ClientId>& wrong) {
  std::vector<MaskStream> streams;
  for (ClientId i : survivors_) {
    const std::string& commitment = shares_.at(i).seed_commitment;
    Result<Bytes32> seed = recover(
        i, seed_shares_[i], "self-mask seed",
        [&](const Bytes32& s) {
          return std::string(as_view(seed_commitment(setup_.job, setup_.round, i, s))) ==
                 commitment;
        },
        wrong);
    if (!seed.ok()) return fail(seed.status().message());
    Result<PrgKey> key = prg_key(*seed);
    if (!key.ok()) return key.status();
    streams.push_back({*key, PrgExpander::Op::kSubtract});
  }
  for (ClientId j : dropped_) {
    const std::vector<ClientId> masked_with = holders(j, survivors_);
    if (masked_with.empty()) continue;
    const std::string& public_key = keys_.at(j).mask_public_key;
    Result<Bytes32> raw = recover(
        j, key_shares_[j], "mask key",
        [&](const Bytes32& k) {
          Result<Bytes32> pub = public_key_of(k);
          return pub.ok() && std::string(as_view(*pub)) == public_key;
        },
        wrong);
    if (!raw.ok()) return fail(raw.status().message());
    Result<X25519Key> key = X25519Key::load(*raw);
    if (!key.ok()) return key.status();
    for (ClientId i : masked_with) {
      Result<Bytes32> seed = pairwise_seed(*key, to_bytes32(keys_.at(i).mask_public_key),
                                           setup_.job, setup_.round, j, i);
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

Result<SecAggSum> SecAggServer::finish() {
  MutexLock lock(mu_);
  if (stage_ == Stage::kFailed) return failure_;
  if (stage_ != Stage::kUnmask) return conflict("the unmask stage is not open");
  std::set<ClientId> wrong;
  Result<std::vector<MaskStream>> streams = plan_unmasking(wrong);
  if (!streams.ok()) return streams.status();
  SecAggSum out;
  const double unit = double(params_.max_weight) / params_.scale;
  const uint32_t bits = params_.bits;
  FEDCASE_RETURN_IF_ERROR(with_sum([&](auto& sum) {
    FEDCASE_RETURN_IF_ERROR(remove_masks(sum, *streams, *pool_));
    return decode(sum, bits, unit, *pool_, out);
  }));
  out.survivors = sorted(survivors_);
  out.dropped = sorted(dropped_);
  out.left_out = sorted(left_out_);
  out.wrong_shares = sorted(wrong);
  free_sum();
  stage_ = Stage::kDone;
  return out;
}

std::set<std::string> SecAggServer::public_keys() const {
  MutexLock lock(mu_);
  return round_keys_;
}

std::vector<uint64_t> SecAggServer::masked_sum() const {
  MutexLock lock(mu_);
  std::vector<uint64_t> out =
      with_sum([](const auto& sum) { return std::vector<uint64_t>(sum.begin(), sum.end()); });
  const uint64_t low_bits = params_.bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << params_.bits) - 1;
  for (uint64_t& w : out) w &= low_bits;
  return out;
}

size_t SecAggServer::memory_bytes() const {
  MutexLock lock(mu_);
  size_t bytes = sum32_.capacity() * sizeof(uint32_t) + sum64_.capacity() * sizeof(uint64_t);
  if (graph_) bytes += graph_->memory_bytes();
  bytes += keys_.size() * (sizeof(ClientId) + 2 * protocol::kSecAggKeyBytes);
  for (const auto& [client, in] : shares_) {
    bytes += in.seed_commitment.size();
    for (const auto& [to, ciphertext] : in.ciphertexts) bytes += sizeof(to) + ciphertext.size();
  }
  for (const auto& [client, input] : held_) bytes += input.body.size();
  for (const auto* shares : {&seed_shares_, &key_shares_}) {
    for (const auto& [owner, list] : *shares) bytes += list.size() * sizeof(ShamirShare);
  }
  return bytes;
}

}  // namespace fedcase::secagg
