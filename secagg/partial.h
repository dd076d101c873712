#pragma once
// A replica's partial sum of a secure round's masked inputs (docs/scaling.md, "Secure rounds on
// every replica"): the masked vectors it received, added word by word mod 2^bits, and who sent
// them. An input that refused a neighbour's share, or whose share an input before it refused,
// is held whole beside the sum instead (HeldInput): whether it joins the sum is the owner's
// decision when the stage closes, with every replica's inputs known (secagg/server.h, "Refusal
// conflicts"), so no input the owner must leave out is ever inside a partial's sum. The owner's
// SecAggServer merges a partial (merge_masked_partial) as if it had received those inputs
// itself. A partial is masked as its inputs are: the masks of its senders cancel only against
// those of the other replicas' and the owner's inputs, and the self-masks only at the
// unmasking.
//
// Encoding: 8 bytes (little-endian) giving the header's length, the header (JSON:
// {"inputs": [client, ...], "held": [[client, [refused, ...]], ...]}), then the running sum as a
// masked vector's body (words little-endian words of word_bytes bytes, each the sum mod
// 2^(8 word_bytes)), then each held input's body in the header's order.
//
// Thread safety: a MaskedPartial is used by one thread at a time; the functions are pure.

#include <cstdint>
#include <cstring>
#include <memory>
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

// `sum`'s words as a masked vector's body: each word's low `word_bytes` bytes, little-endian.
template <class Word>
std::string pack_words(const std::vector<Word>& sum, uint32_t word_bytes) {
  std::string out(sum.size() * word_bytes, '\0');
  for (size_t i = 0; i < sum.size(); ++i) {
    std::memcpy(out.data() + i * word_bytes, &sum[i], word_bytes);  // little-endian hosts
  }
  return out;
}

// The most inputs a SecAggServer or a MaskedPartial holds whole in a round of neighbour graph
// degree `degree` (each is one masked vector in memory): one bad client's neighbours, who all
// refuse its share, and the client itself. An input that would be held past it is refused
// (kResourceExhausted) and its sender counts as dropped.
inline size_t max_held_inputs(uint32_t degree) { return size_t(degree) + 1; }

// An input held whole until the masked input stage closes: its sender refused a neighbour's
// share, or an input that came before refused its sender's share.
struct HeldInput {
  ClientId client = 0;
  std::vector<ClientId> refused;  // SecAggMaskedInput::refused_shares
  std::string body;               // the masked vector
};

// Whether an input from `sender` that refused the shares of `refused` is held whole rather than
// folded, when the inputs held before it refused the shares of `refused_before`.
inline bool must_hold(ClientId sender, const std::vector<ClientId>& refused,
                      const std::set<ClientId>& refused_before) {
  return !refused.empty() || refused_before.count(sender) != 0;
}

// Whether there is room for that input: kResourceExhausted when it must be held and `held` of
// `max_held` inputs are held already.
Status check_room_to_hold(ClientId sender, const std::vector<ClientId>& refused,
                          const std::set<ClientId>& refused_before, size_t held, size_t max_held);

class MaskedPartial {
 public:
  // A partial of vectors of `words` words (vector_length + 1) of `word_bytes` (1 to 8) bytes,
  // folded over `threads` threads, holding at most `max_held` inputs whole (max_held_inputs).
  MaskedPartial(uint64_t words, uint32_t word_bytes, size_t threads, size_t max_held);

  // Whether fold() would take this input: kResourceExhausted when it would be held and
  // max_held are held already.
  Status can_take(const protocol::SecAggMaskedInput& header) const;
  // Adds a masked vector whose header the caller checked (its sender, length and word size:
  // `body` holds words() words): folded into the sum, or held whole (must_hold). kInvalidArgument
  // for a body of another size; kResourceExhausted as can_take().
  Status fold(const protocol::SecAggMaskedInput& header, std::string_view body);
  // The inputs taken, folded or held.
  size_t inputs() const { return folded_.size() + held_.size(); }
  uint64_t words() const { return words_; }
  std::string encode() const;

 private:
  const uint64_t words_;
  const uint32_t word_bytes_;
  const size_t max_held_;
  std::unique_ptr<aggregation::WorkerPool> pool_;
  std::vector<uint32_t> sum32_;  // word_bytes <= 4
  std::vector<uint64_t> sum64_;  // word_bytes > 4
  std::vector<ClientId> folded_;  // the senders in the sum
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
