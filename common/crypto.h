#pragma once
// Secrets and digests (OpenSSL): bearer tokens are random, stored only as their SHA-256.

#include <string>
#include <string_view>

#include "common/status.h"

namespace fedcase {

// `bytes` bytes from the OS CSPRNG, hex-encoded (2 * bytes characters). kInternal when the
// RNG fails.
Result<std::string> random_token(size_t bytes = 32);

// A uniformly random 64-bit value from the OS CSPRNG. kInternal when the RNG fails.
Result<uint64_t> random_u64();

// Lower-case hex SHA-256 of `data`.
std::string sha256_hex(std::string_view data);

// SHA-256 of bytes that arrive in pieces: add() each piece in order, then hex() gives what
// sha256_hex of their concatenation gives. Not thread-safe; one digest per instance.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void add(std::string_view piece);
  std::string hex();  // the digest; the instance is spent after it

 private:
  void* context_;  // EVP_MD_CTX
};
// Base64 (RFC 4648, padded) of the bytes that the hex digits `hex` spell (an odd last digit is
// ignored), e.g. a sha256_hex digest for an HTTP Repr-Digest field.
std::string hex_to_base64(std::string_view hex);

// The reason of the oldest error in this thread's OpenSSL error queue (which it then clears),
// or `fallback` when the queue is empty: for messages about certificates and keys.
std::string take_openssl_error(const std::string& fallback);

// Compares two strings in time independent of where they differ.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace fedcase
