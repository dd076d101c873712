#pragma once
// The cryptographic primitives of secure aggregation, each a thin wrapper over OpenSSL 3's EVP
// interface (no cipher is implemented here): the OS CSPRNG, X25519 key pairs and agreement,
// Ed25519 signatures (a client's long-term identity), HKDF-SHA256, SHA-256 and AES-256-GCM for
// the shares between clients.
//
// Secrets are plain 32-byte arrays owned by the caller. Pure functions; thread-safe (OpenSSL 3
// needs no locking set-up). Errors are Status values, never exceptions: kInternal when OpenSSL
// itself fails, kInvalidArgument for bad input (a low-order peer key, a ciphertext that does
// not authenticate).

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

struct evp_pkey_st;  // OpenSSL's EVP_PKEY

namespace fedcase::secagg {

using Bytes32 = std::array<uint8_t, 32>;

inline std::string_view as_view(const Bytes32& b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}
// The first 32 bytes of `s` (which must hold at least 32).
Bytes32 to_bytes32(std::string_view s);

// `size` bytes from the OS CSPRNG (RAND_bytes).
Status random_bytes(uint8_t* out, size_t size);
Result<Bytes32> random_seed();

// An X25519 key pair (RFC 7748): the raw private scalar and public point.
struct KeyPair {
  Bytes32 private_key{};
  Bytes32 public_key{};
};
Result<KeyPair> generate_key_pair();
// The public key of a raw private key (for checking a reconstructed key).
Result<Bytes32> public_key_of(const Bytes32& private_key);
// An X25519 private key loaded into OpenSSL once, for many agreements (loading a raw private
// key computes its public key, a scalar multiplication as costly as the agreement itself).
// Copies share the key; agree() may run on several threads at once.
class X25519Key {
 public:
  static Result<X25519Key> load(const Bytes32& private_key);
  // X25519(this key, peer_public_key). kInvalidArgument when the peer key is a low-order point
  // (the shared secret would be all zeros).
  Result<Bytes32> agree(const Bytes32& peer_public_key) const;

 private:
  struct Free {
    void operator()(evp_pkey_st* key) const;
  };
  std::shared_ptr<evp_pkey_st> key_;
};

// X25519(private_key, peer_public_key), as X25519Key::load(private_key)->agree(...).
Result<Bytes32> agree(const Bytes32& private_key, const Bytes32& peer_public_key);

// Ed25519 (RFC 8032): a client's long-term signing key, which signs the keys it advertises in
// each round (docs/secure_aggregation.md, "Signed keys"). The raw 32-byte seed is the private
// key.
inline constexpr size_t kSignatureBytes = 64;
Result<KeyPair> generate_signing_key();
// The Ed25519 public key of a raw private key (seed).
Result<Bytes32> signing_public_key_of(const Bytes32& private_key);
// The signature of `message` (kSignatureBytes).
Result<std::string> sign(const Bytes32& private_key, std::string_view message);
// Whether `signature` is `public_key`'s over `message`: OK, or kPermissionDenied (a signature
// that does not verify, of the wrong size, or a public key that is not a valid point).
Status verify_signature(std::string_view public_key, std::string_view message,
                        std::string_view signature);

// HKDF-SHA256 (RFC 5869) of `secret` with an empty salt and `info`: 32 bytes.
Result<Bytes32> derive_key(const Bytes32& secret, std::string_view info);
Bytes32 sha256(std::string_view data);

// AES-256-GCM with a random 96-bit nonce: seal gives nonce || ciphertext || tag, kAeadOverhead
// bytes longer than the plaintext; open refuses (kInvalidArgument) anything that does not
// authenticate under `key` and `associated_data`.
inline constexpr size_t kAeadOverhead = 12 + 16;
Result<std::string> seal(const Bytes32& key, std::string_view plaintext,
                         std::string_view associated_data);
Result<std::string> open(const Bytes32& key, std::string_view sealed,
                         std::string_view associated_data);

// Appends `value` as 8 little-endian bytes (the binding of keys and messages to ids).
void append_u64(std::string& out, uint64_t value);

}  // namespace fedcase::secagg
