#pragma once
// One secure-aggregation round in one process: a SecAggServer and one SecAggClient per
// invitee, driven stage by stage, with messages passed as the wire carries them (written to
// JSON text and read back). Tests choose who drops out before each stage and may tamper with
// any message on its way.

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "protocol/secagg.h"
#include "secagg/client.h"
#include "secagg/params.h"
#include "secagg/server.h"

namespace fedcase::secagg::testing {

// A message through JSON text and its reader, as the coordinator or the SDK would get it.
template <class T>
T over_the_wire(const T& message, nlohmann::json (*write)(const T&),
                Result<T> (*read)(const nlohmann::json&)) {
  Result<T> back = read(nlohmann::json::parse(write(message).dump()));
  REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  return *back;
}

// Deterministic pseudo-random deltas in [-amplitude, amplitude).
inline std::vector<float> random_update(size_t length, uint64_t seed, float amplitude) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-amplitude, amplitude);
  std::vector<float> out(length);
  for (float& v : out) v = u(rng);
  return out;
}

struct RoundOptions {
  JobId job = 1;
  RoundIndex round = 1;
  size_t clients = 5;
  size_t length = 100;
  uint32_t degree = 4;
  uint32_t threshold = 3;
  uint32_t bits = 32;
  double clip = 10;
  double scale = 0;  // 0: the largest that fits `bits` (max_scale)
  uint64_t max_weight = 1000;
  uint64_t graph_seed = 7;
  std::set<std::string> used_public_keys;
};

class TestRound {
 public:
  explicit TestRound(const RoundOptions& o) : options_(o) {
    SecAggRoundSetup setup;
    setup.job = o.job;
    setup.round = o.round;
    for (size_t i = 0; i < o.clients; ++i) setup.invitees.push_back(100 + 3 * i);
    setup.params.degree = o.degree;
    setup.params.threshold = o.threshold;
    setup.params.bits = o.bits;
    setup.params.clip = o.clip;
    setup.params.max_weight = o.max_weight;
    setup.params.vector_length = o.length;
    if (o.scale > 0) {
      setup.params.scale = o.scale;
    } else {
      Result<double> scale = max_scale(o.clients, o.clip, o.max_weight, o.bits);
      REQUIRE_MESSAGE(scale.ok(), scale.status().to_string());
      setup.params.scale = *scale;
    }
    for (int i = 0; i < 32; ++i) setup.graph_seed[i] = uint8_t(o.graph_seed >> (i % 8) * 8);
    setup.used_public_keys = o.used_public_keys;
    for (ClientId c : setup.invitees) {
      Result<KeyPair> signing = generate_signing_key();
      REQUIRE(signing.ok());
      signing_keys_[c] = *signing;
      setup.signing_keys[c] = std::string(as_view(signing->public_key));
    }
    Result<std::unique_ptr<SecAggServer>> server = SecAggServer::create(setup);
    REQUIRE_MESSAGE(server.ok(), server.status().to_string());
    server_ = std::move(*server);
    for (ClientId c : setup.invitees) {
      clients_[c] = std::make_unique<SecAggClient>(o.job, o.round, c, signing_keys_[c].private_key);
    }
    invitees_ = setup.invitees;
  }

  SecAggServer& server() { return *server_; }
  const SecAggServer& server() const { return *server_; }
  SecAggClient& client(ClientId c) { return *clients_.at(c); }
  const KeyPair& signing_key(ClientId c) const { return signing_keys_.at(c); }
  const std::vector<ClientId>& invitees() const { return invitees_; }
  const RoundOptions& options() const { return options_; }

  // Each stage: the clients not in `absent` take part; `tamper` may change a client's message
  // before the server sees it. Returns the clients whose message the server accepted.
  std::set<ClientId> advertise(const std::set<ClientId>& absent = {}) {
    std::set<ClientId> accepted;
    for (ClientId c : invitees_) {
      if (absent.count(c) != 0) continue;
      Result<protocol::SecAggAdvertiseKeys> m = client(c).advertise_keys();
      REQUIRE_MESSAGE(m.ok(), m.status().to_string());
      keys_[c] = over_the_wire(*m, protocol::write_secagg_advertise_keys,
                               protocol::read_secagg_advertise_keys);
      if (server_->receive_keys(c, keys_[c]).ok()) accepted.insert(c);
    }
    return accepted;
  }

  std::set<ClientId> share(const std::set<ClientId>& absent = {},
                           const std::function<void(protocol::SecAggShares&)>& tamper = {}) {
    REQUIRE(server_->close_keys().ok());
    Result<protocol::SecAggGraph> graph = server_->graph();
    REQUIRE(graph.ok());
    const protocol::SecAggGraph sent_graph =
        over_the_wire(*graph, protocol::write_secagg_graph, protocol::read_secagg_graph);
    std::set<ClientId> accepted;
    for (ClientId c : invitees_) {
      if (absent.count(c) != 0) continue;
      Result<protocol::SecAggKeyList> list = server_->key_list(c);
      if (!list.ok()) continue;  // did not advertise
      Result<protocol::SecAggShares> m = client(c).share_keys(
          sent_graph,
          over_the_wire(*list, protocol::write_secagg_key_list, protocol::read_secagg_key_list));
      REQUIRE_MESSAGE(m.ok(), m.status().to_string());
      protocol::SecAggShares sent =
          over_the_wire(*m, protocol::write_secagg_shares, protocol::read_secagg_shares);
      if (tamper) tamper(sent);
      shares_[c] = sent;
      if (server_->receive_shares(c, sent).ok()) accepted.insert(c);
    }
    return accepted;
  }

  // Masks each present client's update (updates[c], weights[c], scaled by factors[c] when
  // given) and hands it to `deliver` (by default the server's receive_masked_input; true:
  // accepted); returns who was accepted.
  using Deliver = std::function<bool(ClientId, const SecAggMaskedVector&)>;
  std::set<ClientId> mask(const std::map<ClientId, std::vector<float>>& updates,
                          const std::map<ClientId, uint64_t>& weights,
                          const std::set<ClientId>& absent = {}, const Deliver& deliver = {},
                          const std::map<ClientId, double>& factors = {}) {
    Status closed = server_->close_shares();
    REQUIRE_MESSAGE(closed.ok(), closed.to_string());
    std::set<ClientId> accepted;
    for (ClientId c : invitees_) {
      if (absent.count(c) != 0) continue;
      Result<protocol::SecAggForwardedShares> f = server_->forwarded_shares(c);
      if (!f.ok()) continue;  // did not share
      const std::vector<float>& u = updates.at(c);
      Result<SecAggMaskedVector> m =
          client(c).mask_input(over_the_wire(*f, protocol::write_secagg_forwarded_shares,
                                             protocol::read_secagg_forwarded_shares),
                               u.data(), u.size(), weights.at(c),
                               factors.count(c) ? factors.at(c) : 1.0);
      REQUIRE_MESSAGE(m.ok(), m.status().to_string());
      masked_[c] = *m;
      const bool taken = deliver ? deliver(c, *m)
                                 : server_->receive_masked_input(c, m->header, m->body).ok();
      if (taken) accepted.insert(c);
    }
    return accepted;
  }

  // Closes the masked input stage; false (with the server failed) below the threshold.
  bool close_inputs() { return server_->close_masked_inputs().ok(); }

  // `tamper` may change a client's answer before it is sent (a malicious survivor).
  std::set<ClientId> unmask(
      const std::set<ClientId>& absent = {},
      const std::function<void(ClientId, protocol::SecAggUnmaskResponse&)>& tamper = {}) {
    std::set<ClientId> accepted;
    for (ClientId c : invitees_) {
      if (absent.count(c) != 0) continue;
      Result<protocol::SecAggUnmaskRequest> request = server_->unmask_request(c);
      if (!request.ok()) continue;
      Result<protocol::SecAggUnmaskResponse> r = client(c).unmask(over_the_wire(
          *request, protocol::write_secagg_unmask_request, protocol::read_secagg_unmask_request));
      REQUIRE_MESSAGE(r.ok(), r.status().to_string());
      if (tamper) tamper(c, *r);
      if (server_
              ->receive_unmask_response(c, over_the_wire(*r, protocol::write_secagg_unmask_response,
                                                         protocol::read_secagg_unmask_response))
              .ok()) {
        accepted.insert(c);
      }
    }
    return accepted;
  }

  const protocol::SecAggAdvertiseKeys& keys_of(ClientId c) const { return keys_.at(c); }
  const protocol::SecAggShares& shares_of(ClientId c) const { return shares_.at(c); }
  const SecAggMaskedVector& masked_of(ClientId c) const { return masked_.at(c); }

 private:
  RoundOptions options_;
  std::unique_ptr<SecAggServer> server_;
  std::map<ClientId, std::unique_ptr<SecAggClient>> clients_;
  std::map<ClientId, KeyPair> signing_keys_;  // each client's long-term Ed25519 key
  std::vector<ClientId> invitees_;
  std::map<ClientId, protocol::SecAggAdvertiseKeys> keys_;
  std::map<ClientId, protocol::SecAggShares> shares_;
  std::map<ClientId, SecAggMaskedVector> masked_;
};

// A replica's input stage for a round, made as a replica makes it when the round reaches its
// masked input stage (at the first use, after TestRound::mask closed the share stage): its
// roster from the forwarded shares the owner wrote (or `roster`, for a replica that got it
// wrong), its word size from the round's bits.
class ReplicaInputs {
 public:
  explicit ReplicaInputs(TestRound& round,
                         std::optional<MaskedInputs::Roster> roster = std::nullopt)
      : round_(round), roster_(std::move(roster)) {}
  MaskedInputs* operator->() {
    if (!inputs_) {
      const protocol::SecAggParams params = round_.server().params();
      inputs_.emplace(roster_ ? *roster_ : forwarded_roster(), params.vector_length + 1,
                      word_bytes(params.bits), max_held_inputs(params.degree), pool_);
    }
    return &*inputs_;
  }

 private:
  MaskedInputs::Roster forwarded_roster() {
    std::map<ClientId, protocol::SecAggForwardedShares> forwarded;
    for (ClientId c : round_.invitees()) {
      Result<protocol::SecAggForwardedShares> message = round_.server().forwarded_shares(c);
      if (message.ok()) forwarded.emplace(c, *message);
    }
    REQUIRE_FALSE(forwarded.empty());
    return MaskedInputs::roster_of(forwarded);
  }

  TestRound& round_;
  std::optional<MaskedInputs::Roster> roster_;
  aggregation::WorkerPool pool_{1};
  std::optional<MaskedInputs> inputs_;
};

}  // namespace fedcase::secagg::testing
