#include "secagg/prg.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>

namespace fedcase::secagg {
namespace {

constexpr size_t kBlock = 16;
constexpr size_t kBufferBytes = 64 * 1024;  // keystream produced per OpenSSL call: fits L2

template <class Word, class Acc>
void apply_words(const uint8_t* stream, size_t count, PrgExpander::Op op, Acc* acc) {
  // Little-endian words (x86 and ARM as Debian builds them); memcpy compiles to plain loads.
  switch (op) {
    case PrgExpander::Op::kAdd:
      for (size_t i = 0; i < count; ++i) {
        Word w;
        std::memcpy(&w, stream + i * sizeof(Word), sizeof(Word));
        acc[i] += w;
      }
      break;
    case PrgExpander::Op::kSubtract:
      for (size_t i = 0; i < count; ++i) {
        Word w;
        std::memcpy(&w, stream + i * sizeof(Word), sizeof(Word));
        acc[i] -= w;
      }
      break;
    case PrgExpander::Op::kStore:
      for (size_t i = 0; i < count; ++i) {
        Word w;
        std::memcpy(&w, stream + i * sizeof(Word), sizeof(Word));
        acc[i] = w;
      }
      break;
  }
}

}  // namespace

struct PrgExpander::Context {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  ~Context() { EVP_CIPHER_CTX_free(ctx); }
};

Result<PrgKey> prg_key(const Bytes32& seed) {
  Result<Bytes32> derived = derive_key(seed, "fedcase/secagg/prg");
  if (!derived.ok()) return derived.status();
  PrgKey key;
  std::memcpy(key.key.data(), derived->data(), key.key.size());
  return key;
}

PrgExpander::PrgExpander()
    : ctx_(std::make_unique<Context>()),
      zeros_(kBufferBytes + kBlock),
      stream_(kBufferBytes + kBlock) {}

PrgExpander::~PrgExpander() = default;

Status PrgExpander::apply(const PrgKey& key, uint64_t offset, size_t count, size_t word_bytes,
                          Op op, uint64_t* acc) {
  if (word_bytes != 4 && word_bytes != 8) return invalid_argument("word_bytes must be 4 or 8");
  return apply_to(key, offset, count, word_bytes, op, acc);
}

Status PrgExpander::apply(const PrgKey& key, uint64_t offset, size_t count, Op op, uint32_t* acc) {
  return apply_to(key, offset, count, 4, op, acc);
}

template <class Acc>
Status PrgExpander::apply_to(const PrgKey& key, uint64_t offset, size_t count, size_t word_bytes,
                             Op op, Acc* acc) {
  if (ctx_->ctx == nullptr) return internal_error("OpenSSL failed: cipher context");
  const uint64_t first_byte = offset * word_bytes;
  // The counter block holding the first byte, big-endian in the 128-bit IV.
  uint8_t iv[kBlock] = {};
  uint64_t block = first_byte / kBlock;
  for (int i = 0; i < 8; ++i) iv[15 - i] = static_cast<uint8_t>(block >> (8 * i));
  if (EVP_EncryptInit_ex(ctx_->ctx, EVP_aes_128_ctr(), nullptr, key.key.data(), iv) != 1) {
    return internal_error("OpenSSL failed: AES-CTR init");
  }
  size_t skip = static_cast<size_t>(first_byte % kBlock);
  const size_t words_per_buffer = kBufferBytes / word_bytes;
  for (size_t done = 0; done < count;) {
    const size_t words = std::min(words_per_buffer, count - done);
    const size_t bytes = skip + words * word_bytes;
    int out = 0;
    if (EVP_EncryptUpdate(ctx_->ctx, stream_.data(), &out, zeros_.data(),
                          static_cast<int>(bytes)) != 1) {
      return internal_error("OpenSSL failed: AES-CTR");
    }
    if (word_bytes == 4) {
      apply_words<uint32_t>(stream_.data() + skip, words, op, acc + done);
    } else if constexpr (sizeof(Acc) == 8) {
      apply_words<uint64_t>(stream_.data() + skip, words, op, acc + done);
    }
    skip = 0;
    done += words;
  }
  return ok_status();
}

}  // namespace fedcase::secagg
