// Whole secure-aggregation rounds in one process (tests/secagg/round_util.h): the unmasked sum
// against the plaintext one, dropouts at every stage at and below the threshold, refused
// messages, a client's refusal to reveal both shares of one neighbour, masked vectors against
// uniform, and what the coordinator holds.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "secagg/masked_inputs.h"
#include "secagg/quantize.h"
#include "secagg/shamir.h"
#include "tests/secagg/round_util.h"

namespace fedcase::secagg {
namespace {

using testing::ReplicaInputs;
using testing::RoundOptions;
using testing::TestRound;

struct Inputs {
  std::map<ClientId, std::vector<float>> updates;
  std::map<ClientId, uint64_t> weights;
  std::map<ClientId, double> factors;  // a ready cohort's staleness factors (none: 1)
};

// Updates with L2 norms around 9 (amplitude 0.5 over 1000 values), every fifth three times as
// large (clipped at 10), and weights in [1, 1500] (clipped at max_weight 1000).
Inputs make_inputs(const TestRound& round) {
  Inputs in;
  size_t i = 0;
  for (ClientId c : round.invitees()) {
    std::vector<float> u = testing::random_update(round.options().length, c, 0.5f);
    if (i % 5 == 0) {
      for (float& v : u) v *= 3;
    }
    in.updates[c] = u;
    in.weights[c] = 1 + (c * 7919) % 1500;
    ++i;
  }
  return in;
}

// sum over `clients` of min(w, max_weight) * s * clip(u), in double (s: the client's factor).
std::vector<double> plain_sum(const TestRound& round, const Inputs& in,
                              const std::vector<ClientId>& clients, double& total_weight) {
  const RoundOptions& o = round.options();
  std::vector<double> sum(o.length, 0);
  total_weight = 0;
  for (ClientId c : clients) {
    const std::vector<float>& u = in.updates.at(c);
    const double factor = *l2_clip_factor(u.data(), u.size(), o.clip);
    const double w = double(std::min(in.weights.at(c), o.max_weight));
    const double s = in.factors.count(c) ? in.factors.at(c) : 1.0;
    for (size_t i = 0; i < u.size(); ++i) sum[i] += w * s * factor * double(u[i]);
    total_weight += w;
  }
  return sum;
}

// The unmasked sum is the plaintext one within the quantisation bound: each client's
// stochastic rounding moves each coordinate of w/W * clip(u) * scale by less than one step,
// so K clients move the sum of w * clip(u) by less than K * max_weight / scale per coordinate
// (plus the float32 rounding of the result, 2^-24 relative).
void check_sum(const TestRound& round, const Inputs& in, const SecAggSum& got,
               const std::vector<ClientId>& expected_survivors) {
  CHECK(got.survivors == expected_survivors);
  double total = 0;
  const std::vector<double> want = plain_sum(round, in, expected_survivors, total);
  CHECK(got.total_weight == total);
  const double scale = round.server().params().scale;
  const double bound =
      double(expected_survivors.size()) * double(round.options().max_weight) / scale;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double error = std::abs(double(got.weighted_sum[i]) - want[i]);
    const double allowed = bound + std::abs(want[i]) * 0x1p-23;
    worst = std::max(worst, error / allowed);
    REQUIRE_MESSAGE(error <= allowed,
                    "coordinate " << i << ": " << got.weighted_sum[i] << " against " << want[i]);
  }
  Result<std::vector<float>> mean = got.mean();
  REQUIRE(mean.ok());
  for (size_t i = 0; i < want.size(); ++i) {
    REQUIRE(std::abs(double((*mean)[i]) - want[i] / total) <=
            (bound + std::abs(want[i]) * 0x1p-22) / total);
  }
  MESSAGE("worst error: " << worst << " of the bound (" << bound << ")");
}

RoundOptions options(size_t clients, uint32_t degree, uint32_t threshold) {
  RoundOptions o;
  o.clients = clients;
  o.degree = degree;
  o.threshold = threshold;
  return o;
}

std::vector<ClientId> without(const std::vector<ClientId>& all, const std::set<ClientId>& out) {
  std::vector<ClientId> rest;
  for (ClientId c : all) {
    if (out.count(c) == 0) rest.push_back(c);
  }
  return rest;
}

// Runs every stage with nobody absent and returns the sum.
Result<SecAggSum> full_round(TestRound& round, const Inputs& in) {
  round.advertise();
  round.share();
  round.mask(in.updates, in.weights);
  REQUIRE(round.close_inputs());
  round.unmask();
  return round.server().finish();
}

TEST_CASE("the unmasked sum is the plaintext weighted sum, for K = 3, 10, 50 and several degrees") {
  struct Case {
    size_t clients;
    uint32_t degree, threshold;
  };
  for (Case c : {Case{3, 2, 2}, Case{10, 4, 3}, Case{10, 6, 4}, Case{10, 9, 6}, Case{50, 10, 6},
                 Case{50, 30, 18}, Case{50, 49, 30}}) {
    CAPTURE(c.clients);
    CAPTURE(c.degree);
    RoundOptions o = options(c.clients, c.degree, c.threshold);
    o.length = 1000;
    TestRound round(o);
    const Inputs in = make_inputs(round);
    round.advertise();
    round.share();
    round.mask(in.updates, in.weights);
    REQUIRE(round.close_inputs());
    round.unmask();
    const size_t held = round.server().memory_bytes();
    CHECK(held >= (o.length + 1) * sizeof(uint32_t));  // the running sum, at least
    Result<SecAggSum> sum = round.server().finish();
    REQUIRE_MESSAGE(sum.ok(), sum.status().to_string());
    check_sum(round, in, *sum, round.invitees());
    CHECK(sum->dropped.empty());
    CHECK(round.server().memory_bytes() == 0);  // the round's state is freed
    CHECK(round.server().stage() == Stage::kDone);
  }
}

TEST_CASE("a ready cohort's staleness factors scale each member's values, never its weight") {
  RoundOptions o = options(10, 6, 4);
  o.length = 1000;
  TestRound round(o);
  Inputs in = make_inputs(round);
  size_t i = 0;
  for (ClientId c : round.invitees()) in.factors[c] = 1.0 / double(1 + i++ % 4);  // 1 to 1/4
  round.advertise();
  round.share();
  round.mask(in.updates, in.weights, {}, {}, in.factors);
  REQUIRE(round.close_inputs());
  round.unmask();
  Result<SecAggSum> sum = round.server().finish();
  REQUIRE_MESSAGE(sum.ok(), sum.status().to_string());
  // The weights' total is the members' weights, unscaled: the mean is sum s w u / sum w.
  check_sum(round, in, *sum, round.invitees());
  // A factor outside (0, 1] is refused, nothing masked.
  TestRound other(o);
  other.advertise();
  other.share();
  REQUIRE(other.server().close_shares().ok());
  const ClientId c = other.invitees().front();
  auto forwarded = other.server().forwarded_shares(c);
  REQUIRE(forwarded.ok());
  const std::vector<float> u(o.length, 0.01f);
  for (double bad : {0.0, 1.5, std::nan("")}) {
    CHECK(other.client(c).mask_input(*forwarded, u.data(), u.size(), 1, bad).status().code() ==
          Code::kInvalidArgument);
  }
  CHECK(other.client(c).mask_input(*forwarded, u.data(), u.size(), 1, 0.5).ok());
}

TEST_CASE("a modulus of any width gives the same sum, its words in the fewest bytes") {
  for (const auto& [bits, bytes] : {std::pair<uint32_t, uint32_t>{16, 2}, {20, 3}, {32, 4},
                                    {40, 5}, {48, 6}, {64, 8}}) {
    CAPTURE(bits);
    RoundOptions o = options(10, 4, 3);
    o.bits = bits;
    TestRound round(o);
    const Inputs in = make_inputs(round);
    Result<SecAggSum> sum = full_round(round, in);
    REQUIRE_MESSAGE(sum.ok(), sum.status().to_string());
    const SecAggMaskedVector& masked = round.masked_of(round.invitees()[0]);
    CHECK(masked.header.word_bytes == bytes);
    CHECK(masked.body.size() == (o.length + 1) * bytes);
    check_sum(round, in, *sum, round.invitees());
  }
}

TEST_CASE("masked inputs folded into other replicas' partials give the same sum, or none") {
  for (uint32_t bits : {20u, 32u, 48u}) {
    CAPTURE(bits);
    RoundOptions o = options(12, 6, 4);
    o.bits = bits;
    TestRound round(o);
    const Inputs in = make_inputs(round);
    round.advertise();
    round.share();
    // A third of the inputs reach the owner, the others two replicas' partials, in turn.
    ReplicaInputs b(round), c(round);
    size_t n = 0;
    const std::set<ClientId> sent = round.mask(
        in.updates, in.weights, {}, [&](ClientId client, const SecAggMaskedVector& m) {
          const size_t turn = n++ % 3;
          if (turn == 0) return round.server().receive_masked_input(client, m.header, m.body).ok();
          return (turn == 1 ? b : c)->take(client, m.header, m.body).ok();
        });
    REQUIRE(sent.size() == round.invitees().size());
    CHECK(b->inputs() == 4);
    const std::string encoded_b = b->encode(), encoded_c = c->encode();
    CHECK(round.server().merge_masked_partial(encoded_b.substr(0, encoded_b.size() - 1)).status()
              .code() == Code::kInvalidArgument);
    auto merged = round.server().merge_masked_partial(encoded_b);
    REQUIRE_MESSAGE(merged.ok(), merged.status().to_string());
    CHECK(merged->size() == 4);
    // The same inputs again: refused as a whole, nothing changes.
    const std::vector<uint64_t> before = round.server().masked_sum();
    CHECK(round.server().merge_masked_partial(encoded_b).status().code() == Code::kConflict);
    CHECK(round.server().masked_sum() == before);
    REQUIRE(round.server().merge_masked_partial(encoded_c).ok());
    REQUIRE(round.close_inputs());
    round.unmask();
    Result<SecAggSum> sum = round.server().finish();
    REQUIRE_MESSAGE(sum.ok(), sum.status().to_string());
    check_sum(round, in, *sum, round.invitees());
    CHECK(sum->dropped.empty());
  }
}

TEST_CASE("a partial's input that refuses the share of an input in the sum is left out alone") {
  RoundOptions o = options(6, 5, 3);
  TestRound round(o);
  const Inputs in = make_inputs(round);
  round.advertise();
  round.share();
  ReplicaInputs p(round);
  const ClientId first = round.invitees()[0], liar = round.invitees().back();
  round.mask(in.updates, in.weights, {}, [&](ClientId client, const SecAggMaskedVector& m) {
    if (client == first) return round.server().receive_masked_input(client, m.header, m.body).ok();
    protocol::SecAggMaskedInput header = m.header;
    // The last one claims it could not decrypt the share of a client whose input is in.
    if (client == liar) header.refused_shares = {first};
    return p->take(client, header, m.body).ok();
  });
  CHECK(p->inputs() == 5);
  ReplicaInputs empty(round);
  CHECK(round.server().merge_masked_partial(empty->encode()).status().code() ==
        Code::kInvalidArgument);
  // The partial is taken: its four honest inputs in its sum, the liar's held whole.
  auto merged = round.server().merge_masked_partial(p->encode());
  REQUIRE_MESSAGE(merged.ok(), merged.status().to_string());
  CHECK(merged->size() == 5);
  REQUIRE(round.close_inputs());
  CHECK(round.server().left_out() == std::set<ClientId>{liar});
  round.unmask();
  Result<SecAggSum> sum = round.server().finish();
  REQUIRE_MESSAGE(sum.ok(), sum.status().to_string());
  check_sum(round, in, *sum, without(round.invitees(), {liar}));
  CHECK(sum->dropped == std::vector<ClientId>{liar});
  CHECK(sum->left_out == std::vector<ClientId>{liar});
}

TEST_CASE("a held input that refuses a share it was not forwarded is dropped alone at the merge") {
  RoundOptions o = options(10, 4, 3);
  TestRound round(o);
  const Inputs in = make_inputs(round);
  round.advertise();
  round.share();
  // A replica that checks what it can refuses the liar at once; one that lets every refusal
  // through (its roster names every invitee) hands it to the owner, which drops it alone.
  ReplicaInputs checking(round);
  MaskedInputs::Roster anything;
  for (ClientId c : round.invitees()) {
    anything[c] = std::set<ClientId>(round.invitees().begin(), round.invitees().end());
  }
  ReplicaInputs p(round, anything);
  const ClientId liar = round.invitees()[0];
  round.mask(in.updates, in.weights, {}, [&](ClientId client, const SecAggMaskedVector& m) {
    protocol::SecAggMaskedInput header = m.header;
    if (client == liar) {
      // It claims it refused the share of a client that is not its neighbour.
      std::set<ClientId> strangers(round.invitees().begin() + 1, round.invitees().end());
      const auto forwarded = round.server().forwarded_shares(liar);
      REQUIRE(forwarded.ok());
      for (const auto& share : forwarded->shares) {
        strangers.erase(share.client);
      }
      REQUIRE_FALSE(strangers.empty());
      header.refused_shares = {*strangers.begin()};
      CHECK(checking->take(client, header, m.body).code() == Code::kInvalidArgument);
    }
    return p->take(client, header, m.body).ok();
  });
  auto merged = round.server().merge_masked_partial(p->encode());
  REQUIRE_MESSAGE(merged.ok(), merged.status().to_string());
  CHECK(merged->size() == round.invitees().size() - 1);
  CHECK(std::find(merged->begin(), merged->end(), liar) == merged->end());
  REQUIRE(round.close_inputs());
  round.unmask();
  Result<SecAggSum> sum = round.server().finish();
  REQUIRE_MESSAGE(sum.ok(), sum.status().to_string());
  check_sum(round, in, *sum, without(round.invitees(), {liar}));
  CHECK(sum->left_out.empty());  // refused at the merge: it never counted as sent
}

TEST_CASE("inputs are held whole up to the graph's degree + 1; past that one is refused alone") {
  RoundOptions o = options(10, 4, 3);
  TestRound round(o);
  const Inputs in = make_inputs(round);
  round.advertise();
  round.share();
  ReplicaInputs partial(round);
  std::vector<Code> owner, replica;
  round.mask(in.updates, in.weights, {}, [&](ClientId client, const SecAggMaskedVector& m) {
    // Every client claims to refuse the share of its first neighbour: every input is held.
    protocol::SecAggMaskedInput header = m.header;
    header.refused_shares = {round.server().forwarded_shares(client)->shares.front().client};
    owner.push_back(round.server().receive_masked_input(client, header, m.body).code());
    replica.push_back(partial->take(client, header, m.body).code());
    return owner.back() == Code::kOk;
  });
  const std::vector<Code> expected = {Code::kOk, Code::kOk, Code::kOk, Code::kOk, Code::kOk,
                                      Code::kResourceExhausted, Code::kResourceExhausted,
                                      Code::kResourceExhausted, Code::kResourceExhausted,
                                      Code::kResourceExhausted};
  CHECK(owner == expected);
  CHECK(replica == expected);
  CHECK(partial->inputs() == 5);
  // Held, nothing folded yet.
  CHECK(round.server().masked_sum() == std::vector<uint64_t>(o.length + 1, 0));
}

TEST_CASE("refusal conflicts: held inputs left out, fewest first, never one already summed") {
  const auto held = [](std::map<ClientId, std::vector<ClientId>> refusals) {
    std::vector<HeldInput> out;
    for (auto& [client, refused] : refusals) out.push_back({client, refused, ""});
    return out;
  };
  // No conflict: a refused client that sent no input.
  CHECK(leave_out({1, 2}, held({{3, {9}}})).empty());
  // One refusal of a summed input: the refuser goes.
  CHECK(leave_out({1, 2}, held({{3, {1}}})) == std::set<ClientId>{3});
  // A pair of held inputs: the refused one goes.
  CHECK(leave_out({1}, held({{3, {5}}, {5, {}}})) == std::set<ClientId>{5});
  // One client refused by four held neighbours: it alone goes.
  CHECK(leave_out({}, held({{2, {6}}, {3, {6}}, {4, {6}}, {5, {6}}, {6, {}}})) ==
        std::set<ClientId>{6});
  // One client refusing four held neighbours: it alone goes.
  CHECK(leave_out({}, held({{2, {}}, {3, {}}, {4, {}}, {5, {}}, {6, {2, 3, 4, 5}}})) ==
        std::set<ClientId>{6});
  // Two that refused each other: the smaller id goes.
  CHECK(leave_out({}, held({{4, {7}}, {7, {4}}})) == std::set<ClientId>{4});
}

// The complete graph over 10 clients with t = 6: a secret of one client is held by its 9
// neighbours, so it can be rebuilt while at most 3 of them are gone.
RoundOptions complete_ten() { return options(10, 9, 6); }

TEST_CASE(
    "dropouts after key sharing: at the threshold the sum is the survivors', below it fails") {
  for (size_t absent_count : {size_t(3), size_t(4)}) {
    CAPTURE(absent_count);
    TestRound round(complete_ten());
    const Inputs in = make_inputs(round);
    const std::set<ClientId> absent(round.invitees().begin(),
                                    round.invitees().begin() + absent_count);
    round.advertise();
    round.share();
    round.mask(in.updates, in.weights, absent);
    if (absent_count == 3) {
      // 7 survivors: each secret (a survivor's seed, a dropped client's key) has 6 holders.
      REQUIRE(round.close_inputs());
      round.unmask();
      Result<SecAggSum> sum = round.server().finish();
      REQUIRE_MESSAGE(sum.ok(), sum.status().to_string());
      check_sum(round, in, *sum, without(round.invitees(), absent));
      CHECK(sum->dropped == std::vector<ClientId>(absent.begin(), absent.end()));
    } else {
      CHECK_FALSE(round.close_inputs());
      CHECK(round.server().stage() == Stage::kFailed);
      const std::string reason = round.server().failure().message();
      CHECK(reason.find("held by 5 clients that sent their input, fewer than the threshold 6") !=
            std::string::npos);
      CHECK_FALSE(round.server().finish().ok());
      CHECK(round.server().masked_sum().empty());  // a failed round frees its sum
    }
  }
}

TEST_CASE("dropouts after masked input: at the threshold the sum is everyone's, below it fails") {
  for (size_t absent_count : {size_t(3), size_t(4)}) {
    CAPTURE(absent_count);
    TestRound round(complete_ten());
    const Inputs in = make_inputs(round);
    const std::set<ClientId> absent(round.invitees().end() - absent_count, round.invitees().end());
    round.advertise();
    round.share();
    round.mask(in.updates, in.weights);
    REQUIRE(round.close_inputs());
    round.unmask(absent);
    Result<SecAggSum> sum = round.server().finish();
    if (absent_count == 3) {
      REQUIRE_MESSAGE(sum.ok(), sum.status().to_string());
      check_sum(round, in, *sum, round.invitees());  // their inputs arrived: they count
    } else {
      REQUIRE_FALSE(sum.ok());
      CHECK(sum.status().code() == Code::kConflict);
      CHECK(sum.status().message().find("5 shares arrived, the threshold is 6") !=
            std::string::npos);
    }
  }
}

TEST_CASE("a survivor that answers wrong shares is outvoted and named; the sum is everyone's") {
  for (size_t absent_count : {size_t(0), size_t(2)}) {
    CAPTURE(absent_count);
    TestRound round(complete_ten());
    const Inputs in = make_inputs(round);
    const ClientId liar = round.invitees()[1];
    // The last ones drop out after their masked input... or before it, so that their mask
    // keys are rebuilt from shares too.
    const std::set<ClientId> absent(round.invitees().end() - absent_count, round.invitees().end());
    round.advertise();
    round.share();
    round.mask(in.updates, in.weights);
    REQUIRE(round.close_inputs());
    size_t changed = 0;
    round.unmask(absent, [&](ClientId c, protocol::SecAggUnmaskResponse& answer) {
      if (c != liar) return;
      for (auto* list : {&answer.seed_shares, &answer.key_shares}) {
        for (protocol::SecAggShare& s : *list) {
          Result<ShamirShare> share = decode_share(s.share);
          REQUIRE(share.ok());
          share->y[2] = (share->y[2] + 1) % kShamirPrime;  // in the field, off the polynomial
          s.share = encode_share(*share);
          ++changed;
        }
      }
    });
    REQUIRE(changed > 0);
    Result<SecAggSum> sum = round.server().finish();
    REQUIRE_MESSAGE(sum.ok(), sum.status().to_string());
    check_sum(round, in, *sum, round.invitees());
    CHECK(sum->wrong_shares == std::vector<ClientId>{liar});
  }
}

TEST_CASE("dropouts at every stage of a sparse round") {
  RoundOptions o = options(50, 10, 6);
  TestRound round(o);
  const Inputs in = make_inputs(round);
  const std::vector<ClientId>& all = round.invitees();
  const std::set<ClientId> no_keys = {all[1]}, no_shares = {all[7], all[20]},
                           no_input = {all[3], all[30], all[41]}, no_unmask = {all[12], all[44]};
  round.advertise(no_keys);
  round.share(no_shares);
  round.mask(in.updates, in.weights, no_input);
  REQUIRE(round.close_inputs());
  round.unmask(no_unmask);
  Result<SecAggSum> sum = round.server().finish();
  REQUIRE_MESSAGE(sum.ok(), sum.status().to_string());
  std::set<ClientId> out = no_keys;
  out.insert(no_shares.begin(), no_shares.end());
  out.insert(no_input.begin(), no_input.end());
  check_sum(round, in, *sum, without(all, out));
  CHECK(sum->dropped == std::vector<ClientId>(no_input.begin(), no_input.end()));
}

TEST_CASE("malformed shares are refused, change nothing, and the round completes without them") {
  RoundOptions o = options(10, 6, 3);
  TestRound round(o);
  const Inputs in = make_inputs(round);
  const ClientId truncated = round.invitees()[2], missing = round.invitees()[5],
                 foreign = round.invitees()[8];
  std::optional<protocol::SecAggShares> intact;
  round.advertise();
  const std::set<ClientId> accepted = round.share({}, [&](protocol::SecAggShares& m) {
    if (m.client == truncated) {
      intact = m;
      m.shares[0].ciphertext.pop_back();
    }
    if (m.client == missing) m.shares.pop_back();
    if (m.client == foreign) m.shares[0].client = 999;  // not a neighbour
  });
  CHECK(accepted.size() == 7);
  for (ClientId c : {truncated, missing, foreign}) {
    CHECK(accepted.count(c) == 0);
    protocol::SecAggShares m = round.shares_of(c);
    CHECK(round.server().receive_shares(c, m).code() == Code::kInvalidArgument);
  }
  // The refusals changed nothing: the truncated client's intact message is then taken as its
  // first, and its input counts.
  REQUIRE(intact.has_value());
  CHECK(round.server().receive_shares(truncated, *intact).ok());
  round.mask(in.updates, in.weights);
  REQUIRE(round.close_inputs());
  round.unmask();
  Result<SecAggSum> sum = round.server().finish();
  REQUIRE_MESSAGE(sum.ok(), sum.status().to_string());
  check_sum(round, in, *sum, without(round.invitees(), {missing, foreign}));
}

TEST_CASE("a masked vector of the wrong length or out of stage is refused; the round goes on") {
  RoundOptions o = options(10, 4, 3);
  TestRound round(o);
  const Inputs in = make_inputs(round);
  round.advertise();
  // Out of stage: a masked input while keys are advertised, a share list likewise.
  protocol::SecAggMaskedInput early{o.job, o.round, round.invitees()[0], o.length + 1, 4, {}};
  CHECK(round.server()
            .receive_masked_input(round.invitees()[0], early, std::string((o.length + 1) * 4, '\0'))
            .code() == Code::kConflict);
  round.share();
  round.mask(in.updates, in.weights);
  const ClientId c = round.invitees()[4];
  const SecAggMaskedVector& sent = round.masked_of(c);
  // Send again: refused (second input), and each malformed variant too.
  CHECK(round.server().receive_masked_input(c, sent.header, sent.body).code() == Code::kConflict);
  TestRound other(o);
  other.advertise();
  other.share();
  REQUIRE(other.server().close_shares().ok());
  const std::vector<uint64_t> before = other.server().masked_sum();
  protocol::SecAggMaskedInput shorter = sent.header;
  CHECK(other.server().receive_masked_input(c, shorter, sent.body.substr(4)).code() ==
        Code::kUnprocessable);
  shorter.words -= 1;
  CHECK(other.server().receive_masked_input(c, shorter, sent.body.substr(4)).code() ==
        Code::kUnprocessable);
  protocol::SecAggMaskedInput wide = sent.header;
  wide.word_bytes = 8;
  CHECK(other.server().receive_masked_input(c, wide, sent.body + sent.body).code() ==
        Code::kUnprocessable);
  protocol::SecAggMaskedInput spoofed = sent.header;
  spoofed.client = round.invitees()[5];
  CHECK(other.server().receive_masked_input(c, spoofed, sent.body).code() ==
        Code::kPermissionDenied);
  CHECK(other.server().masked_sum() == before);  // refused inputs folded nothing
  REQUIRE(round.close_inputs());
  round.unmask();
  Result<SecAggSum> sum = round.server().finish();
  REQUIRE_MESSAGE(sum.ok(), sum.status().to_string());
  check_sum(round, in, *sum, round.invitees());
}

TEST_CASE("replays of a previous round's keys, shares or input are refused") {
  RoundOptions o = options(5, 4, 3);
  TestRound first(o);
  const Inputs in1 = make_inputs(first);
  REQUIRE(full_round(first, in1).ok());

  o.round = 2;
  o.used_public_keys = first.server().public_keys();
  CHECK(o.used_public_keys.size() == 10);
  TestRound second(o);
  const Inputs in2 = make_inputs(second);
  const ClientId a = second.invitees()[0], b = second.invitees()[1], c = second.invitees()[2];
  SecAggServer& server = second.server();
  // Round 1's advertisement as it was, then with its round rewritten: both refused.
  protocol::SecAggAdvertiseKeys old_keys = first.keys_of(a);
  CHECK(server.receive_keys(a, old_keys).code() == Code::kPermissionDenied);
  old_keys.round = 2;
  Status replay = server.receive_keys(a, old_keys);
  CHECK(replay.code() == Code::kPermissionDenied);
  CHECK(replay.message().find("replays a public key of an earlier round") != std::string::npos);
  // Another client's fresh key of this round, copied: refused too.
  second.advertise();
  protocol::SecAggAdvertiseKeys copied = second.keys_of(b);
  copied.client = a;
  CHECK(server.receive_keys(a, copied).code() == Code::kConflict);  // a already advertised

  // Round 1's shares as they were: refused (another round). With the round rewritten they pass
  // the coordinator (it cannot read them), but no recipient can decrypt them: each names b in
  // refused_shares, and b's input is kept out of the sum.
  CHECK(server.close_keys().ok());
  std::set<ClientId> accepted;
  for (ClientId id : second.invitees()) {
    Result<protocol::SecAggKeyList> list = server.key_list(id);
    REQUIRE(list.ok());
    Result<protocol::SecAggShares> m = second.client(id).share_keys(*server.graph(), *list);
    REQUIRE(m.ok());
    if (id == b) {
      CHECK(server.receive_shares(b, first.shares_of(b)).code() == Code::kPermissionDenied);
      protocol::SecAggShares rewritten = first.shares_of(b);
      rewritten.round = 2;
      CHECK(server.receive_shares(b, rewritten).ok());
    } else {
      CHECK(server.receive_shares(id, *m).ok());
    }
  }
  CHECK(server.close_shares().ok());
  // Round 1's masked input header: refused.
  const SecAggMaskedVector& old_input = first.masked_of(c);
  CHECK(server.receive_masked_input(c, old_input.header, old_input.body).code() ==
        Code::kPermissionDenied);
  std::set<ClientId> folded;
  for (ClientId id : second.invitees()) {
    if (id == b) continue;  // b goes last: its neighbours have refused its share by then
    Result<protocol::SecAggForwardedShares> f = server.forwarded_shares(id);
    REQUIRE(f.ok());
    Result<SecAggMaskedVector> m =
        second.client(id).mask_input(*f, in2.updates.at(id).data(), o.length, in2.weights.at(id), 1);
    REQUIRE(m.ok());
    CHECK(m->header.refused_shares == std::vector<ClientId>{b});
    CHECK(server.receive_masked_input(id, m->header, m->body).ok());
  }
  Result<SecAggMaskedVector> from_b = second.client(b).mask_input(
      *server.forwarded_shares(b), in2.updates.at(b).data(), o.length, in2.weights.at(b), 1);
  REQUIRE(from_b.ok());
  // Taken, but held: its share was refused. At the close it is left out, alone (refused by
  // four), and the four that refused it are in the sum.
  CHECK(server.receive_masked_input(b, from_b->header, from_b->body).ok());
  REQUIRE(second.close_inputs());
  second.unmask();
  Result<SecAggSum> sum = server.finish();
  REQUIRE_MESSAGE(sum.ok(), sum.status().to_string());
  check_sum(second, in2, *sum, without(second.invitees(), {b}));
  CHECK(sum->dropped == std::vector<ClientId>{b});
  CHECK(sum->left_out == std::vector<ClientId>{b});
}

TEST_CASE("advertised keys must carry the client's signature under the key it registered") {
  RoundOptions o = options(5, 4, 3);
  TestRound round(o);
  SecAggServer& server = round.server();
  const ClientId a = round.invitees()[0], b = round.invitees()[1];
  Result<protocol::SecAggAdvertiseKeys> keys = round.client(a).advertise_keys();
  REQUIRE(keys.ok());
  // Another key in place of the signed one, or another client's signature: refused.
  protocol::SecAggAdvertiseKeys swapped = *keys;
  auto other = generate_key_pair();
  REQUIRE(other.ok());
  swapped.mask_public_key = std::string(as_view(other->public_key));
  Status refused = server.receive_keys(a, swapped);
  CHECK(refused.code() == Code::kPermissionDenied);
  CHECK(refused.message().find("do not carry its signature") != std::string::npos);
  protocol::SecAggAdvertiseKeys foreign = *keys;
  foreign.signature = *sign(round.signing_key(b).private_key,
                            advertised_keys_message(o.job, o.round, a, keys->cipher_public_key,
                                                    keys->mask_public_key));
  CHECK(server.receive_keys(a, foreign).code() == Code::kPermissionDenied);
  // As signed: taken.
  CHECK(server.receive_keys(a, *keys).ok());
  // A client that registered no signing key cannot advertise.
  SecAggRoundSetup setup;
  setup.job = o.job;
  setup.round = o.round;
  setup.invitees = round.invitees();
  setup.params = server.params();
  setup.threads = 1;
  for (ClientId c : round.invitees()) {
    if (c != b) setup.signing_keys[c] = std::string(as_view(round.signing_key(c).public_key));
  }
  auto unsigned_round = SecAggServer::create(setup);
  REQUIRE(unsigned_round.ok());
  SecAggClient client_b(o.job, o.round, b, round.signing_key(b).private_key);
  Status no_key = (*unsigned_round)->receive_keys(b, *client_b.advertise_keys());
  CHECK(no_key.code() == Code::kPermissionDenied);
  CHECK(no_key.message().find("registered no signing key") != std::string::npos);
}

TEST_CASE("a client shares nothing with a key list whose keys its neighbours did not sign") {
  RoundOptions o = options(5, 4, 3);
  TestRound round(o);
  round.advertise();
  REQUIRE(round.server().close_keys().ok());
  const ClientId a = round.invitees()[0];
  Result<protocol::SecAggKeyList> list = round.server().key_list(a);
  REQUIRE(list.ok());
  auto other = generate_key_pair();
  REQUIRE(other.ok());
  list->neighbours.back().cipher_public_key = std::string(as_view(other->public_key));
  Result<protocol::SecAggShares> shares = round.client(a).share_keys(*round.server().graph(), *list);
  CHECK(shares.status().code() == Code::kPermissionDenied);
  CHECK(round.client(a).stage() == SecAggClient::Stage::kShareKeys);
  // The list as the coordinator wrote it: shared.
  CHECK(round.client(a).share_keys(*round.server().graph(), *round.server().key_list(a)).ok());
}

TEST_CASE("a client refuses an unmask request that asks for both shares of one neighbour") {
  RoundOptions o = options(5, 4, 3);
  TestRound round(o);
  const Inputs in = make_inputs(round);
  round.advertise();
  round.share();
  round.mask(in.updates, in.weights);
  REQUIRE(round.close_inputs());
  const ClientId c = round.invitees()[0], peer = round.invitees()[1], other = round.invitees()[2];
  SecAggClient& client = round.client(c);
  protocol::SecAggUnmaskRequest both{o.job, o.round, {peer, other}, {peer}};
  Result<protocol::SecAggUnmaskResponse> refused = client.unmask(both);
  CHECK(refused.status().code() == Code::kPermissionDenied);
  CHECK(refused.status().message().find("both shares") != std::string::npos);
  // Across requests: the seed share of `peer` first, then its key share.
  REQUIRE(client.unmask({o.job, o.round, {peer}, {}}).ok());
  CHECK(client.unmask({o.job, o.round, {}, {peer}}).status().code() == Code::kPermissionDenied);
  CHECK(client.unmask({o.job, o.round, {peer}, {}}).ok());  // the same share again is fine
  // Not a neighbour's, another round's: refused.
  CHECK(client.unmask({o.job, o.round, {999}, {}}).status().code() == Code::kPermissionDenied);
  CHECK(client.unmask({o.job, o.round + 1, {peer}, {}}).status().code() == Code::kPermissionDenied);
  // The coordinator builds its requests by the same rule: never both for one client.
  for (ClientId id : round.invitees()) {
    Result<protocol::SecAggUnmaskRequest> r = round.server().unmask_request(id);
    REQUIRE(r.ok());
    for (ClientId s : r->survivors) {
      CHECK(std::find(r->dropped.begin(), r->dropped.end(), s) == r->dropped.end());
    }
  }
}

TEST_CASE("a client refuses messages out of stage, of another round or with a forged graph") {
  RoundOptions o = options(10, 4, 3);
  TestRound round(o);
  const ClientId c = round.invitees()[0];
  SecAggClient& client = round.client(c);
  CHECK(client.unmask({o.job, o.round, {}, {}}).status().code() == Code::kConflict);
  round.advertise();
  CHECK(client.advertise_keys().status().code() == Code::kConflict);
  REQUIRE(round.server().close_keys().ok());
  const protocol::SecAggGraph graph = *round.server().graph();
  protocol::SecAggKeyList list = *round.server().key_list(c);
  protocol::SecAggKeyList other_round = list;
  other_round.round = 9;
  CHECK(client.share_keys(graph, other_round).status().code() == Code::kPermissionDenied);
  protocol::SecAggGraph other_graph = graph;
  other_graph.round = 9;
  CHECK(client.share_keys(other_graph, list).status().code() == Code::kPermissionDenied);
  // Neighbours that are not the ones the seed draws (one swapped for a non-neighbour).
  protocol::SecAggKeyList forged = list;
  for (ClientId id : round.invitees()) {
    if (id != c &&
        !std::any_of(list.neighbours.begin(), list.neighbours.end(),
                     [&](const protocol::SecAggPeerKeys& p) { return p.client == id; })) {
      forged.neighbours[0].client = id;
      break;
    }
  }
  CHECK(client.share_keys(graph, forged).status().code() == Code::kPermissionDenied);
  protocol::SecAggGraph reseeded = graph;
  reseeded.graph_seed[0] ^= 1;
  CHECK(client.share_keys(reseeded, list).status().code() == Code::kPermissionDenied);
  CHECK(client.stage() == SecAggClient::Stage::kShareKeys);  // nothing changed
  CHECK(client.share_keys(graph, list).ok());
}

// Pearson's chi-square statistic of `words` (values mod 2^bits) over 256 equal buckets.
double chi_square(const std::vector<uint64_t>& words, uint32_t bits) {
  std::vector<double> counts(256, 0);
  for (uint64_t w : words) counts[(w >> (bits - 8)) & 255] += 1;
  const double expected = double(words.size()) / 256;
  double chi = 0;
  for (double c : counts) chi += (c - expected) * (c - expected) / expected;
  return chi;
}

// The largest deviation of any of the `bits` bit positions from frequency 1/2, in standard
// deviations (sqrt(n) / 2) of a fair coin.
double worst_bit_z(const std::vector<uint64_t>& words, uint32_t bits) {
  double worst = 0;
  for (uint32_t b = 0; b < bits; ++b) {
    double ones = 0;
    for (uint64_t w : words) ones += double((w >> b) & 1);
    const double n = double(words.size());
    worst = std::max(worst, std::abs(ones - n / 2) / (std::sqrt(n) / 2));
  }
  return worst;
}

TEST_CASE(
    "a masked vector of a non-uniform input looks uniform; the plain quantised one does not") {
  RoundOptions o = options(5, 4, 3);
  o.length = 65535;
  o.graph_seed = 11;
  TestRound round(o);
  // A sparse, skewed input: mostly zeros, a few small positive values.
  Inputs in;
  for (ClientId c : round.invitees()) {
    std::vector<float> u(o.length, 0.0f);
    for (size_t i = 0; i < u.size(); i += 97) u[i] = 0.01f * float(i % 7);
    in.updates[c] = u;
    in.weights[c] = 500;
  }
  round.advertise();
  round.share();
  round.mask(in.updates, in.weights);
  const SecAggMaskedVector& masked = round.masked_of(round.invitees()[0]);
  std::vector<uint64_t> masked_words(masked.header.words);
  for (size_t i = 0; i < masked_words.size(); ++i) {
    uint32_t w;
    std::memcpy(&w, masked.body.data() + 4 * i, 4);
    masked_words[i] = w;
  }
  // The same input quantised without masks (as the client encodes it before masking).
  const std::vector<float>& u = in.updates.at(round.invitees()[0]);
  std::vector<uint64_t> plain(o.length);
  PrgExpander expander;
  Bytes32 seed{};
  const double multiplier = 0.5 * round.server().params().scale;
  REQUIRE(quantize(u.data(), u.size(), multiplier, *prg_key(seed), 0, expander, plain.data()).ok());
  for (uint64_t& w : plain) w &= 0xffffffffu;
  // 255 degrees of freedom: P[chi^2 > 400] is about 1e-8 for uniform words. Each bit of a
  // uniform word is a fair coin: |z| > 6 has probability about 2e-9 per bit.
  const double masked_chi = chi_square(masked_words, 32), plain_chi = chi_square(plain, 32);
  const double masked_z = worst_bit_z(masked_words, 32), plain_z = worst_bit_z(plain, 32);
  MESSAGE("chi-square masked " << masked_chi << ", plain " << plain_chi << "; worst bit z masked "
                               << masked_z << ", plain " << plain_z);
  CHECK(masked_chi < 400);
  CHECK(masked_z < 6);
  CHECK(plain_chi > 400);
  CHECK(plain_z > 6);
}

TEST_CASE("the coordinator never holds an individual update: its running sum is far from one") {
  RoundOptions o = options(5, 4, 3);
  o.length = 4096;
  TestRound round(o);
  // One known sparse update (a few large coordinates), the others zero.
  Inputs in;
  for (ClientId c : round.invitees()) {
    in.updates[c] = std::vector<float>(o.length, 0.0f);
    in.weights[c] = 1000;
  }
  const ClientId known = round.invitees()[0];
  for (size_t i = 0; i < o.length; i += 512) in.updates[known][i] = 1.0f;
  round.advertise();
  round.share();
  // Only the known update is folded: the sum is that one client's masked vector.
  round.mask(in.updates, in.weights, {round.invitees().begin() + 1, round.invitees().end()});
  const std::vector<uint64_t> held = round.server().masked_sum();
  REQUIRE(held.size() == o.length + 1);
  const uint32_t bits = round.server().params().bits;
  size_t zeros = 0, near = 0;
  const double step = round.server().params().scale;  // the quantised value of 1.0 at w = W
  for (size_t i = 0; i < o.length; ++i) {
    const double v = double(to_signed(held[i], bits));
    const double plain = double(in.updates[known][i]) * step;
    zeros += held[i] == 0;
    near += std::abs(v - plain) < 1000;
  }
  // A plain sum would be zero in all but 8 coordinates; the masked one is not zero anywhere
  // (about 4096 / 2^32 expected) and near the plain value almost nowhere.
  CHECK(zeros < 2);
  CHECK(near < 3);
  CHECK(held[o.length] != 1000);  // nor does it show the weight
}

}  // namespace
}  // namespace fedcase::secagg
