#include "secagg/client.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "secagg/graph.h"
#include "secagg/params.h"
#include "secagg/quantize.h"
#include "secagg/round_crypto.h"
#include "secagg/shamir.h"

namespace fedcase::secagg {

using Stage = SecAggClient::Stage;

// What a state's handler gives: the message to send, and the next state (null: stay).
template <class Message>
struct Step {
  Message message;
  std::unique_ptr<ClientState> next;
};

// One stage of the client. Each handler leaves the state as it was when it fails.
class ClientState {
 public:
  virtual ~ClientState() = default;
  virtual Stage stage() const = 0;
  virtual Result<Step<protocol::SecAggAdvertiseKeys>> advertise_keys() {
    return out_of_stage("advertise keys");
  }
  virtual Result<Step<protocol::SecAggShares>> share_keys(const protocol::SecAggGraph&,
                                                          const protocol::SecAggKeyList&) {
    return out_of_stage("share keys");
  }
  virtual Result<Step<SecAggMaskedVector>> mask_input(const protocol::SecAggForwardedShares&,
                                                      const float*, size_t, uint64_t, double) {
    return out_of_stage("mask the input");
  }
  virtual Result<Step<protocol::SecAggUnmaskResponse>> unmask(
      const protocol::SecAggUnmaskRequest&) {
    return out_of_stage("unmask");
  }

 protected:
  Status out_of_stage(const char* what) const {
    static const char* kNames[] = {"advertise keys", "share keys", "masked input", "unmask"};
    return conflict(std::string("cannot ") + what + " in the " + kNames[static_cast<int>(stage())] +
                    " stage");
  }
};

namespace {

struct Binding {
  JobId job = 0;
  RoundIndex round = 0;
  ClientId self = 0;
  Bytes32 signing_key{};  // the client's long-term Ed25519 key
  std::shared_ptr<aggregation::WorkerPool> pool;  // masks the vector; one stage at a time

  Status check(JobId j, RoundIndex r, const char* what) const {
    if (j != job || r != round) {
      return permission_denied(std::string(what) + " belongs to job " + std::to_string(j) +
                               " round " + std::to_string(r) + ", not job " + std::to_string(job) +
                               " round " + std::to_string(round));
    }
    return ok_status();
  }
};

struct OwnKeys {
  KeyPair cipher;
  KeyPair mask;
  X25519Key cipher_key;  // cipher.private_key and mask.private_key, loaded
  X25519Key mask_key;
};

struct PeerKeys {
  Bytes32 cipher_public{};
  Bytes32 mask_public{};
};

// A neighbour's shares this client holds: of its self-mask seed and of its mask key.
struct HeldShares {
  std::string seed_share;
  std::string key_share;
};

class UnmaskState : public ClientState {
 public:
  UnmaskState(Binding binding, std::map<ClientId, HeldShares> held)
      : binding_(binding), held_(std::move(held)) {}
  Stage stage() const override { return Stage::kUnmask; }

  Result<Step<protocol::SecAggUnmaskResponse>> unmask(
      const protocol::SecAggUnmaskRequest& request) override {
    FEDCASE_RETURN_IF_ERROR(binding_.check(request.job, request.round, "the unmask request"));
    std::map<ClientId, bool> asked;  // client -> seed share (true) or key share (false)
    for (ClientId c : request.survivors) asked[c] = true;
    for (ClientId c : request.dropped) {
      if (asked.count(c) != 0) {
        return permission_denied("the unmask request asks for both shares of client " +
                                 std::to_string(c));
      }
      asked[c] = false;
    }
    for (const auto& [client, seed] : asked) {
      if (held_.count(client) == 0) {
        return permission_denied("the unmask request asks for client " + std::to_string(client) +
                                 ", whose shares this client does not hold");
      }
      auto before = revealed_.find(client);
      if (before != revealed_.end() && before->second != seed) {
        return permission_denied("the unmask request asks for the " +
                                 std::string(seed ? "seed" : "key") + " share of client " +
                                 std::to_string(client) + ", whose " + (seed ? "key" : "seed") +
                                 " share was already revealed");
      }
    }
    protocol::SecAggUnmaskResponse response;
    response.job = binding_.job;
    response.round = binding_.round;
    response.client = binding_.self;
    for (ClientId c : request.survivors) response.seed_shares.push_back({c, held_[c].seed_share});
    for (ClientId c : request.dropped) response.key_shares.push_back({c, held_[c].key_share});
    for (const auto& [client, seed] : asked) revealed_[client] = seed;
    return Step<protocol::SecAggUnmaskResponse>{std::move(response), nullptr};
  }

 private:
  Binding binding_;
  std::map<ClientId, HeldShares> held_;
  std::map<ClientId, bool> revealed_;  // client -> which share was revealed (true: seed)
};

class MaskingState : public ClientState {
 public:
  // `index`: this client's x coordinate in the graph (what its shares are for).
  MaskingState(Binding binding, OwnKeys keys, Bytes32 seed, protocol::SecAggParams params,
               uint32_t index, std::map<ClientId, PeerKeys> peers)
      : binding_(std::move(binding)),
        keys_(std::move(keys)),
        seed_(seed),
        params_(params),
        index_(index),
        peers_(std::move(peers)) {}
  Stage stage() const override { return Stage::kMaskedInput; }

  Result<Step<SecAggMaskedVector>> mask_input(const protocol::SecAggForwardedShares& forwarded,
                                              const float* delta, size_t count, uint64_t weight,
                                              double staleness_factor) override {
    FEDCASE_RETURN_IF_ERROR(binding_.check(forwarded.job, forwarded.round, "the forwarded shares"));
    if (!(staleness_factor > 0 && staleness_factor <= 1)) {
      return invalid_argument("a staleness factor is in (0, 1]; this one is " +
                              std::to_string(staleness_factor));
    }
    if (count != params_.vector_length) {
      return unprocessable("the update holds " + std::to_string(count) + " values, the round " +
                           std::to_string(params_.vector_length));
    }
    if (forwarded.shares.size() < params_.threshold) {
      return permission_denied("only " + std::to_string(forwarded.shares.size()) +
                               " neighbours completed the share stage, fewer than the threshold " +
                               std::to_string(params_.threshold));
    }
    std::map<ClientId, HeldShares> held;
    std::vector<ClientId> refused;
    std::vector<MaskStream> streams;
    for (const protocol::SecAggCiphertext& c : forwarded.shares) {
      auto peer = peers_.find(c.client);
      if (peer == peers_.end()) {
        return permission_denied("client " + std::to_string(c.client) + " is not a neighbour");
      }
      // A neighbour whose share does not decrypt cannot be unmasked if it drops: no pairwise
      // mask with it (the coordinator keeps such pairs out of the sum together).
      Result<HeldShares> shares = open_shares(c, peer->second);
      if (!shares.ok()) {
        refused.push_back(c.client);
        continue;
      }
      held[c.client] = std::move(*shares);
      Result<Bytes32> pairwise =
          pairwise_seed(keys_.mask_key, peer->second.mask_public, binding_.job, binding_.round,
                        binding_.self, c.client);
      if (!pairwise.ok()) return pairwise.status();
      Result<PrgKey> key = prg_key(*pairwise);
      if (!key.ok()) return key.status();
      streams.push_back({*key, pairwise_op(binding_.self, c.client)});
    }
    Result<PrgKey> self_key = prg_key(seed_);
    if (!self_key.ok()) return self_key.status();
    streams.push_back({*self_key, PrgExpander::Op::kAdd});

    Result<double> factor = l2_clip_factor(delta, count, params_.clip);
    if (!factor.ok()) return factor.status();
    const uint64_t w = std::min(weight, params_.max_weight);
    const double multiplier =
        *factor * staleness_factor * (double(w) / double(params_.max_weight)) * params_.scale;
    std::vector<uint64_t> vector(count + 1);
    Result<Bytes32> rounding_seed = random_seed();
    if (!rounding_seed.ok()) return rounding_seed.status();
    Result<PrgKey> rounding = prg_key(*rounding_seed);
    if (!rounding.ok()) return rounding.status();
    FEDCASE_RETURN_IF_ERROR(for_ranges(*binding_.pool, count, [&](size_t begin, size_t end) {
      PrgExpander expander;
      return quantize(delta + begin, end - begin, multiplier, *rounding, begin, expander,
                      vector.data() + begin);
    }));
    vector[count] = w;
    FEDCASE_RETURN_IF_ERROR(apply_streams(streams, vector.size(), lane_bytes(params_.bits),
                                          *binding_.pool, vector.data()));
    const uint32_t bytes = word_bytes(params_.bits);

    SecAggMaskedVector out;
    out.header = {binding_.job, binding_.round, binding_.self, vector.size(), bytes, refused};
    out.body.resize(vector.size() * bytes);
    const uint64_t low_bits = params_.bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << params_.bits) - 1;
    for (size_t i = 0; i < vector.size(); ++i) {
      const uint64_t word = vector[i] & low_bits;  // little-endian, as the hosts Debian targets
      std::memcpy(out.body.data() + i * bytes, &word, bytes);
    }
    return Step<SecAggMaskedVector>{std::move(out),
                                    std::make_unique<UnmaskState>(binding_, std::move(held))};
  }

 private:
  Result<HeldShares> open_shares(const protocol::SecAggCiphertext& c, const PeerKeys& peer) const {
    Result<Bytes32> key = share_key(keys_.cipher_key, peer.cipher_public, binding_.job,
                                    binding_.round, c.client, binding_.self);
    if (!key.ok()) return key.status();
    Result<std::string> plain =
        open(*key, c.ciphertext,
             share_associated_data(binding_.job, binding_.round, c.client, binding_.self));
    if (!plain.ok()) return plain.status();
    if (plain->size() != kSharePlaintextBytes) return invalid_argument("a share of a bad size");
    HeldShares held{plain->substr(0, kShareBytes), plain->substr(kShareBytes)};
    const uint32_t x = index_;
    for (const std::string* share : {&held.seed_share, &held.key_share}) {
      Result<ShamirShare> decoded = decode_share(*share);
      if (!decoded.ok()) return decoded.status();
      if (decoded->x != x) return invalid_argument("a share for another holder");
    }
    return held;
  }

  Binding binding_;
  OwnKeys keys_;
  Bytes32 seed_;
  protocol::SecAggParams params_;
  uint32_t index_;
  std::map<ClientId, PeerKeys> peers_;  // the neighbours (the client keeps no more of the graph)
};

class SharingState : public ClientState {
 public:
  SharingState(Binding binding, OwnKeys keys) : binding_(binding), keys_(keys) {}
  Stage stage() const override { return Stage::kShareKeys; }

  Result<Step<protocol::SecAggShares>> share_keys(const protocol::SecAggGraph& round,
                                                  const protocol::SecAggKeyList& list) override {
    FEDCASE_RETURN_IF_ERROR(binding_.check(round.job, round.round, "the graph"));
    FEDCASE_RETURN_IF_ERROR(binding_.check(list.job, list.round, "the key list"));
    FEDCASE_RETURN_IF_ERROR(validate_params(round.params, round.participants.size()));
    if (round.graph_seed.size() != protocol::kSecAggKeyBytes) {
      return invalid_argument("the graph seed must hold 32 bytes");
    }
    if (!std::binary_search(round.participants.begin(), round.participants.end(), binding_.self)) {
      return permission_denied("the graph's participants do not include this client");
    }
    Result<Neighbourhood> mine = NeighbourGraph::neighbourhood(
        round.participants, round.params.degree, to_bytes32(round.graph_seed), binding_.self);
    if (!mine.ok()) return mine.status();
    std::map<ClientId, PeerKeys> peers;
    for (const protocol::SecAggPeerKeys& p : list.neighbours) {
      if (p.cipher_public_key.size() != protocol::kSecAggKeyBytes ||
          p.mask_public_key.size() != protocol::kSecAggKeyBytes) {
        return invalid_argument("a neighbour's public keys must hold 32 bytes each");
      }
      // Nothing is encrypted to keys their client did not sign: a key substituted on the way
      // (by a replica or in the database) ends this client's part in the round here.
      FEDCASE_RETURN_IF_ERROR(check_keys_signature(binding_.job, binding_.round, p.client,
                                                   p.cipher_public_key, p.mask_public_key,
                                                   p.signing_public_key, p.signature));
      peers[p.client] = {to_bytes32(p.cipher_public_key), to_bytes32(p.mask_public_key)};
    }
    const std::vector<ClientId>& expected = mine->neighbours;
    std::vector<ClientId> given;
    for (const auto& [client, keys] : peers) given.push_back(client);
    if (given != expected || given.size() != list.neighbours.size()) {
      return permission_denied("the key list's neighbours are not the ones its graph seed draws");
    }

    Result<Bytes32> seed = random_seed();
    if (!seed.ok()) return seed.status();
    std::vector<uint32_t> xs;
    for (ClientId c : expected) {
      const auto at = std::lower_bound(round.participants.begin(), round.participants.end(), c);
      xs.push_back(static_cast<uint32_t>(at - round.participants.begin()) + 1);
    }
    Result<std::vector<ShamirShare>> seed_shares = shamir_split(*seed, round.params.threshold, xs);
    if (!seed_shares.ok()) return seed_shares.status();
    Result<std::vector<ShamirShare>> key_shares =
        shamir_split(keys_.mask.private_key, round.params.threshold, xs);
    if (!key_shares.ok()) return key_shares.status();

    protocol::SecAggShares out;
    out.job = binding_.job;
    out.round = binding_.round;
    out.client = binding_.self;
    out.seed_commitment =
        std::string(as_view(seed_commitment(binding_.job, binding_.round, binding_.self, *seed)));
    for (size_t i = 0; i < expected.size(); ++i) {
      const ClientId to = expected[i];
      Result<Bytes32> key = share_key(keys_.cipher_key, peers[to].cipher_public, binding_.job,
                                      binding_.round, binding_.self, to);
      if (!key.ok()) return key.status();
      Result<std::string> sealed =
          seal(*key, encode_share((*seed_shares)[i]) + encode_share((*key_shares)[i]),
               share_associated_data(binding_.job, binding_.round, binding_.self, to));
      if (!sealed.ok()) return sealed.status();
      out.shares.push_back({to, std::move(*sealed)});
    }
    return Step<protocol::SecAggShares>{
        std::move(out), std::make_unique<MaskingState>(binding_, keys_, *seed, round.params,
                                                       mine->index, std::move(peers))};
  }

 private:
  Binding binding_;
  OwnKeys keys_;
};

class AdvertiseState : public ClientState {
 public:
  explicit AdvertiseState(Binding binding) : binding_(binding) {}
  Stage stage() const override { return Stage::kAdvertiseKeys; }

  Result<Step<protocol::SecAggAdvertiseKeys>> advertise_keys() override {
    Result<KeyPair> cipher = generate_key_pair();
    if (!cipher.ok()) return cipher.status();
    Result<KeyPair> mask = generate_key_pair();
    if (!mask.ok()) return mask.status();
    Result<X25519Key> cipher_key = X25519Key::load(cipher->private_key);
    if (!cipher_key.ok()) return cipher_key.status();
    Result<X25519Key> mask_key = X25519Key::load(mask->private_key);
    if (!mask_key.ok()) return mask_key.status();
    protocol::SecAggAdvertiseKeys out{binding_.job, binding_.round, binding_.self,
                                      std::string(as_view(cipher->public_key)),
                                      std::string(as_view(mask->public_key)), ""};
    Result<std::string> signature =
        sign(binding_.signing_key,
             advertised_keys_message(out.job, out.round, out.client, out.cipher_public_key,
                                     out.mask_public_key));
    if (!signature.ok()) return signature.status();
    out.signature = std::move(signature).value();
    return Step<protocol::SecAggAdvertiseKeys>{
        std::move(out),
        std::make_unique<SharingState>(binding_, OwnKeys{*cipher, *mask, *cipher_key, *mask_key})};
  }

 private:
  Binding binding_;
};

// Runs `handler` on the current state; on success takes the next state (if any) and returns
// the message.
template <class Message, class Handler>
Result<Message> advance(std::unique_ptr<ClientState>& state, Handler handler) {
  Result<Step<Message>> step = handler(*state);
  if (!step.ok()) return step.status();
  if (step->next) state = std::move(step->next);
  return std::move(step->message);
}

}  // namespace

SecAggClient::SecAggClient(JobId job, RoundIndex round, ClientId self,
                           const Bytes32& signing_key, size_t threads)
    : state_(std::make_unique<AdvertiseState>(
          Binding{job, round, self, signing_key,
                  std::make_shared<aggregation::WorkerPool>(std::max<size_t>(1, threads))})) {}

SecAggClient::~SecAggClient() = default;

Stage SecAggClient::stage() const { return state_->stage(); }

Result<protocol::SecAggAdvertiseKeys> SecAggClient::advertise_keys() {
  return advance<protocol::SecAggAdvertiseKeys>(state_,
                                                [](ClientState& s) { return s.advertise_keys(); });
}

Result<protocol::SecAggShares> SecAggClient::share_keys(const protocol::SecAggGraph& graph,
                                                        const protocol::SecAggKeyList& keys) {
  return advance<protocol::SecAggShares>(state_,
                                         [&](ClientState& s) { return s.share_keys(graph, keys); });
}

Result<SecAggMaskedVector> SecAggClient::mask_input(const protocol::SecAggForwardedShares& shares,
                                                    const float* delta, size_t count,
                                                    uint64_t weight, double factor) {
  return advance<SecAggMaskedVector>(state_, [&](ClientState& s) {
    return s.mask_input(shares, delta, count, weight, factor);
  });
}

Result<protocol::SecAggUnmaskResponse> SecAggClient::unmask(
    const protocol::SecAggUnmaskRequest& request) {
  return advance<protocol::SecAggUnmaskResponse>(state_,
                                                 [&](ClientState& s) { return s.unmask(request); });
}

}  // namespace fedcase::secagg
