#pragma once
// A replica's partial sum of a secure round's masked inputs (docs/scaling.md, "Secure rounds on
// every replica"): the masked vectors it received, added word by word mod 2^bits,
// and who sent them with the shares each refused. The owner's SecAggServer merges it
// (merge_masked_partial) as if it had received those inputs itself. A partial is masked as its
// inputs are: the masks of its senders cancel only against those of the other replicas' and
// the owner's inputs, and the self-masks only at the unmasking.
//
// Encoding: 8 bytes (little-endian) giving the header's length, the header (JSON:
// {"inputs": [[client, [refused, ...]], ...]}), then the running sum as a masked vector's body
// (words little-endian words of word_bytes bytes, each the sum mod 2^(8 word_bytes)).
//
// Thread safety: a MaskedPartial is used by one thread at a time; the functions are pure.

#include <cstdint>
#include <cstring>
#include <memory>
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

// One input of a partial: its sender and the shares it refused (SecAggMaskedInput).
using PartialInput = std::pair<ClientId, std::vector<ClientId>>;

class MaskedPartial {
 public:
  // A partial of vectors of `words` words (vector_length + 1) of `word_bytes` (1 to 8) bytes,
  // folded over `threads` threads.
  MaskedPartial(uint64_t words, uint32_t word_bytes, size_t threads);

  // Adds a masked vector whose header the caller checked (its sender, length and word size:
  // `body` holds words() words); kInvalidArgument for a body of another size.
  Status fold(const protocol::SecAggMaskedInput& header, std::string_view body);
  size_t inputs() const { return inputs_.size(); }
  uint64_t words() const { return words_; }
  std::string encode() const;

 private:
  const uint64_t words_;
  const uint32_t word_bytes_;
  std::unique_ptr<aggregation::WorkerPool> pool_;
  std::vector<uint32_t> sum32_;  // word_bytes <= 4
  std::vector<uint64_t> sum64_;  // word_bytes > 4
  std::vector<PartialInput> inputs_;
};

// A partial as encoded: its inputs, and its sum as a masked vector's body (a view into
// `bytes`). kInvalidArgument unless it is well formed with `words` words of `word_bytes`, at
// least one input and no sender twice.
struct DecodedPartial {
  std::vector<PartialInput> inputs;
  std::string_view sum;
};
Result<DecodedPartial> decode_masked_partial(std::string_view bytes, uint64_t words,
                                             uint32_t word_bytes);

}  // namespace fedcase::secagg
