// A replica's copy of a secure round (server/core/secure/secure_copy.h) against a real round of
// the library's server and clients (tests/secagg/round_util.h): the key lists it serves must
// carry each neighbour's registered signing key and its signature, so a key substituted in the
// store is refused before any client of the replica encrypts a share to it.

#include <doctest/doctest.h>

#include "protocol/secagg.h"
#include "secagg/round_crypto.h"
#include "server/core/secure/secure_copy.h"
#include "tests/secagg/round_util.h"

namespace fedcase::server {
namespace {

using secagg::testing::RoundOptions;
using secagg::testing::TestRound;

// The owner's key list answers (graph and key list) of every participant, as it writes them
// to the store.
std::map<ClientId, std::string> key_replies(TestRound& round) {
  auto graph = round.server().graph();
  REQUIRE(graph.ok());
  const std::string graph_json = protocol::write_secagg_graph(*graph).dump();
  std::map<ClientId, std::string> out;
  for (ClientId c : graph->participants) {
    auto list = round.server().key_list(c);
    REQUIRE(list.ok());
    out[c] = protocol::splice_secagg_keys(graph_json, protocol::write_secagg_key_list(*list).dump());
  }
  return out;
}

// The registered signing keys of `round`'s clients, all of them known.
decltype(SecureRoundCopy::Setup::signing_keys) all_known(TestRound& round) {
  return [&round](const std::vector<ClientId>& clients) {
    std::map<ClientId, std::string> known;
    for (ClientId c : clients) {
      known[c] = std::string(secagg::as_view(round.signing_key(c).public_key));
    }
    return known;
  };
}

// A copy of `round` as a replica would serve it, reading the signing keys from `signing_keys`.
std::unique_ptr<SecureRoundCopy> copy_of(TestRound& round, TaskNotifier& notifier,
                                         decltype(SecureRoundCopy::Setup::signing_keys)
                                             signing_keys) {
  SecureRoundCopy::Setup setup;
  setup.job = round.options().job;
  setup.round = round.options().round;
  setup.invitees = round.invitees();
  setup.vector_length = round.options().length;
  setup.bits = round.options().bits;
  setup.threads = 1;
  setup.signing_keys = std::move(signing_keys);
  setup.relay = [](const char*, ClientId, const std::string&) { return ok_status(); };
  setup.behind = [] {};
  return std::make_unique<SecureRoundCopy>(std::move(setup), notifier);
}

// `message` with its first neighbour's keys changed by `change`.
std::string tampered(const std::string& message,
                     const std::function<void(protocol::SecAggPeerKeys&)>& change) {
  auto keys = protocol::read_secagg_keys(nlohmann::json::parse(message));
  REQUIRE(keys.ok());
  REQUIRE_FALSE(keys->key_list.neighbours.empty());
  change(keys->key_list.neighbours.front());
  return protocol::write_secagg_keys(*keys).dump();
}

TEST_CASE("a replica serves key lists whose keys carry their clients' registered signatures") {
  RoundOptions o;
  o.clients = 5;
  TestRound round(o);
  round.advertise();
  REQUIRE(round.server().close_keys().ok());
  const std::map<ClientId, std::string> replies = key_replies(round);
  const ClientId victim = round.invitees()[0];
  TaskNotifier notifier;

  SUBCASE("a neighbour whose registration the replica has not read yet: published once it has") {
    bool read_all = false;
    const auto known = all_known(round);
    auto behind = copy_of(round, notifier, [&](const std::vector<ClientId>& clients) {
      std::map<ClientId, std::string> read = known(clients);
      if (!read_all) read.erase(round.invitees().back());
      return read;
    });
    CHECK(behind->publish(stage_kind::kKeysReply, replies).code() == Code::kUnavailable);
    CHECK_FALSE(behind->published(stage_kind::kKeysReply));
    auto waiting = behind->keys_reply(victim);
    REQUIRE(waiting.ok());  // not ended: the client's poll waits
    CHECK_FALSE(waiting->has_value());
    read_all = true;
    REQUIRE(behind->publish(stage_kind::kKeysReply, replies).ok());
    CHECK(**behind->keys_reply(victim) == replies.at(victim));
  }

  SUBCASE("as the owner wrote them: served") {
    auto copy = copy_of(round, notifier, all_known(round));
    REQUIRE(copy->publish(stage_kind::kKeysReply, replies).ok());
    auto served = copy->keys_reply(victim);
    REQUIRE(served.ok());
    CHECK(**served == replies.at(victim));
  }
  // What a writer of the store, or a replica passing messages on, could do to read a client's
  // shares: put its own mask key in place of a neighbour's.
  auto attacker = secagg::generate_key_pair();
  auto attacker_signing = secagg::generate_signing_key();
  REQUIRE(attacker.ok());
  REQUIRE(attacker_signing.ok());
  const std::string own_key(secagg::as_view(attacker->public_key));

  SUBCASE("a neighbour's key substituted, its signature kept: refused, nothing served") {
    std::map<ClientId, std::string> changed = replies;
    changed[victim] = tampered(replies.at(victim), [&](protocol::SecAggPeerKeys& p) {
      p.mask_public_key = own_key;
    });
    auto copy = copy_of(round, notifier, all_known(round));
    Status published = copy->publish(stage_kind::kKeysReply, changed);
    CHECK(published.code() == Code::kPermissionDenied);
    CHECK(published.message().find("do not carry its signature") != std::string::npos);
    for (ClientId c : round.invitees()) {
      CHECK(copy->keys_reply(c).status().code() == Code::kConflict);  // the copy ended
    }
    // The client itself refuses the list too, and shares nothing.
    auto keys = protocol::read_secagg_keys(nlohmann::json::parse(changed.at(victim)));
    REQUIRE(keys.ok());
    auto shares = round.client(victim).share_keys(keys->graph, keys->key_list);
    CHECK(shares.status().code() == Code::kPermissionDenied);
    CHECK(round.client(victim).stage() == secagg::SecAggClient::Stage::kShareKeys);
  }

  SUBCASE("a neighbour's keys and signing key substituted and signed anew: refused") {
    std::map<ClientId, std::string> changed = replies;
    changed[victim] = tampered(replies.at(victim), [&](protocol::SecAggPeerKeys& p) {
      p.mask_public_key = own_key;
      p.signing_public_key = std::string(secagg::as_view(attacker_signing->public_key));
      auto signature = secagg::sign(
          attacker_signing->private_key,
          secagg::advertised_keys_message(o.job, o.round, p.client, p.cipher_public_key,
                                          p.mask_public_key));
      REQUIRE(signature.ok());
      p.signature = *signature;
    });
    auto copy = copy_of(round, notifier, all_known(round));
    Status published = copy->publish(stage_kind::kKeysReply, changed);
    CHECK(published.code() == Code::kPermissionDenied);
    CHECK(published.message().find("other than the one it registered") != std::string::npos);
    CHECK(copy->keys_reply(victim).status().code() == Code::kConflict);
  }
}

}  // namespace
}  // namespace fedcase::server
