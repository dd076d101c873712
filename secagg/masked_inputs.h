#pragma once
// The masked input stage's inputs as one coordinator takes them (docs/secure_aggregation.md):
// the rules an input must pass, the running sum of those folded, and those held whole. The
// owner's input stage (stages.h, InputStage) and every replica's copy of another replica's
// round (server/core/secure/secure_copy.h) take inputs through the same MaskedInputs, so the
// rules are written once; a replica hands its inputs to the owner as a partial (encode()),
// which the owner's MaskedInputs merges (merge()) as if it had taken those inputs itself.
//
// Refusal conflicts. A client masks only with the neighbours whose shares it could decrypt,
// and names the others in its input's refused_shares; two neighbours whose inputs are both in
// the sum must have masked with each other. So an input that refused a share, or whose share an
// input before it refused, is held whole (HeldInput) instead of folded, and the owner decides
// which held inputs join the sum when the stage closes (decide(), leave_out): the others are
// left out and count as dropped. No input the owner must leave out is ever inside a partial's
// sum.
//
// A partial is masked as its inputs are: the masks of its senders cancel only against those of
// the other replicas' and the owner's inputs, and the self-masks only at the unmasking.
// Encoding: 8 bytes (little-endian) giving the header's length, the header (JSON:
// {"inputs": [client, ...], "held": [[client, [refused, ...]], ...]}), then the running sum as a
// masked vector's body (words little-endian words of word_bytes bytes, each the sum mod
// 2^(8 word_bytes)), then each held input's body in the header's order.
//
// Thread safety: a MaskedSum or MaskedInputs is used by one thread at a time (its folds split
// over the worker pool it is given); the functions are pure.

#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "aggregation/worker_pool.h"
#include "common/ids.h"
#include "common/status.h"
#include "protocol/secagg.h"
#include "secagg/round_crypto.h"

namespace fedcase::secagg {

// sum[i] += word i of `body` (little-endian words of `word_bytes` <= sizeof(Word) bytes), mod
// 2^(8 sizeof(Word)), over the pool's threads. `body` holds at least sum.size() words.
template <class Word>
Status fold_words(std::vector<Word>& sum, std::string_view body, uint32_t word_bytes,
                  aggregation::WorkerPool& pool) {
  Word* out = sum.data();
  const char* data = body.data();
  return for_ranges(pool, sum.size(), [&](size_t begin, size_t end) {
    if (word_bytes == sizeof(Word)) {  // the common case, with a memcpy of constant size
      for (size_t i = begin; i < end; ++i) {
        Word w;
        std::memcpy(&w, data + i * sizeof(Word), sizeof(Word));
        out[i] += w;
      }
    } else {
      for (size_t i = begin; i < end; ++i) {
        Word w = 0;
        std::memcpy(&w, data + i * word_bytes, word_bytes);  // little-endian hosts
        out[i] += w;
      }
    }
    return ok_status();
  });
}

// A running sum of masked vectors of `words` words of `word_bytes` (1 to 8) bytes, mod 2^bits:
// held in 32-bit words when word_bytes <= 4 (as the vectors), else in 64-bit words.
class MaskedSum {
 public:
  MaskedSum(uint64_t words, uint32_t word_bytes);

  uint64_t words() const { return words_; }
  uint32_t word_bytes() const { return word_bytes_; }
  // Adds a masked vector's body of exactly words() words (kInvalidArgument otherwise).
  Status add(std::string_view body, aggregation::WorkerPool& pool);
  // Calls f(words) with the sum's std::vector<uint32_t> or std::vector<uint64_t>.
  template <class F>
  auto visit(F&& f) {
    return word_bytes_ <= 4 ? f(sum32_) : f(sum64_);
  }
  template <class F>
  auto visit(F&& f) const {
    return word_bytes_ <= 4 ? f(sum32_) : f(sum64_);
  }
  // The sum as a masked vector's body.
  std::string pack() const;
  // Each word mod 2^bits (for tests).
  std::vector<uint64_t> words_mod(uint32_t bits) const;
  size_t memory_bytes() const;

 private:
  uint64_t words_;
  uint32_t word_bytes_;
  std::vector<uint32_t> sum32_;
  std::vector<uint64_t> sum64_;
};

// The most inputs held whole in a round of neighbour graph degree `degree` (each is one masked
// vector in memory): one bad client's neighbours, who all refuse its share, and the client
// itself. An input that would be held past it is refused (kResourceExhausted) and its sender
// counts as dropped.
inline size_t max_held_inputs(uint32_t degree) { return size_t(degree) + 1; }

// An input held whole until the masked input stage closes: its sender refused a neighbour's
// share, or an input that came before refused its sender's share.
struct HeldInput {
  ClientId client = 0;
  std::vector<ClientId> refused;  // SecAggMaskedInput::refused_shares
  std::string body;               // the masked vector
};

// Which held inputs stay out of a sum that holds `folded`'s inputs, so that no held input in the
// sum refused the share of another input in it: first every held input that refused the share
// of a folded one (it cannot be taken out of the sum), then, while a conflict is left, the held
// input in most conflicts, the one refused most on a tie, then the smaller id. Pure.
std::set<ClientId> leave_out(const std::set<ClientId>& folded, const std::vector<HeldInput>& held);

class MaskedInputs {
 public:
  // Who may send an input, and whose shares each may refuse: every client that completed the
  // share stage, with the neighbours whose shares it was forwarded.
  using Roster = std::map<ClientId, std::set<ClientId>>;
  // The roster the forwarded shares of a round tell (one message per client that shared).
  static Roster roster_of(const std::map<ClientId, protocol::SecAggForwardedShares>& forwarded);

  // Inputs of `words` words (vector_length + 1) of `word_bytes` bytes, folded over `pool`
  // (which must outlive this object), holding at most `max_held` whole (max_held_inputs).
  MaskedInputs(Roster roster, uint64_t words, uint32_t word_bytes, size_t max_held,
               aggregation::WorkerPool& pool);

  // Every rule an input must pass that needs no other coordinator's inputs: its sender
  // completed the share stage (kPermissionDenied) and sent no input yet (kConflict); its vector
  // has words() words of the round's word size (kUnprocessable) and a body of that size
  // (protocol::check_masked_vector); every share it refused is one it was forwarded
  // (kInvalidArgument); and there is room to hold it if it must be held (kResourceExhausted).
  Status check(ClientId sender, const protocol::SecAggMaskedInput& header,
               size_t body_bytes) const;
  // Checks the input (check) and folds it into the sum or holds it whole. `body` is read during
  // the call, never kept unless held.
  Status take(ClientId sender, const protocol::SecAggMaskedInput& header, std::string_view body);
  // Takes another coordinator's partial (encode()) as if its inputs had come here: its sum with
  // the inputs folded in it, and each held input alone (one whose sender sent an input already,
  // refused a share it was not forwarded, or would be held past max_held is dropped). Returns
  // the senders taken: the folded ones, then the held ones, in the partial's order. kConflict
  // when a sender in its sum sent an input already (a replica that let a second input through),
  // kPermissionDenied for one that did not complete the share stage: the partial then changes
  // nothing; kInvalidArgument for a malformed partial.
  Result<std::vector<ClientId>> merge(std::string_view partial);
  // The inputs taken as a partial for the owner.
  std::string encode() const;

  // The inputs taken, folded or held.
  size_t inputs() const { return folded_.size() + held_.size(); }
  uint64_t words() const { return sum_.words(); }
  const Roster& roster() const { return roster_; }
  const MaskedSum& sum() const { return sum_; }
  size_t memory_bytes() const;

  // What the stage's close decided: the held inputs that join the sum are folded in, the
  // others left out (leave_out).
  struct Decided {
    MaskedSum sum;
    std::set<ClientId> survivors;  // whose input is in the sum
    std::set<ClientId> left_out;   // whose input a refusal conflict left out
    // Each client whose share an input in the sum refused, with those inputs' senders (they
    // did not mask with it and hold no share of it to reveal).
    std::map<ClientId, std::set<ClientId>> refusers;
  };
  Result<Decided> decide() &&;

 private:
  // Whether `sender` may send an input (it shared and sent none yet).
  Status check_sender(ClientId sender) const;
  // Whether every share in `refused` is one `sender` was forwarded.
  Status check_refused(ClientId sender, const std::vector<ClientId>& refused) const;
  // Whether an input from `sender` refusing `refused` is held whole rather than folded.
  bool must_hold(ClientId sender, const std::vector<ClientId>& refused) const;
  void hold(HeldInput input);

  Roster roster_;
  size_t max_held_;
  aggregation::WorkerPool* pool_;
  MaskedSum sum_;
  std::vector<ClientId> folded_;  // the senders in the sum, in order
  std::set<ClientId> sent_;       // every sender taken
  std::vector<HeldInput> held_;
  std::set<ClientId> refused_by_held_;  // whose shares the held inputs refused
};

// A partial as encoded: the senders in its sum, its sum as a masked vector's body (a view into
// `bytes`), and its held inputs. kInvalidArgument unless it is well formed with `words` words of
// `word_bytes`, at least one input, no sender twice and at most `max_held` held.
struct DecodedPartial {
  std::vector<ClientId> folded;
  std::string_view sum;
  std::vector<HeldInput> held;
};
Result<DecodedPartial> decode_masked_partial(std::string_view bytes, uint64_t words,
                                             uint32_t word_bytes, size_t max_held);

}  // namespace fedcase::secagg
