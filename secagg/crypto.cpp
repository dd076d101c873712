#include "secagg/crypto.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <cstring>
#include <memory>

namespace fedcase::secagg {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
};
struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* p) const { EVP_CIPHER_CTX_free(p); }
};
struct KdfFree {
  void operator()(EVP_KDF* p) const { EVP_KDF_free(p); }
};
struct KdfCtxFree {
  void operator()(EVP_KDF_CTX* p) const { EVP_KDF_CTX_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree>;
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

Status openssl_failure(const char* what) {
  return internal_error(std::string("OpenSSL failed: ") + what);
}

Pkey private_key(const Bytes32& raw) {
  return Pkey(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, raw.data(), raw.size()));
}

const unsigned char* bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

Bytes32 to_bytes32(std::string_view s) {
  Bytes32 out{};
  std::memcpy(out.data(), s.data(), out.size());
  return out;
}

Status random_bytes(uint8_t* out, size_t size) {
  if (RAND_bytes(out, static_cast<int>(size)) != 1) return openssl_failure("RAND_bytes");
  return ok_status();
}

Result<Bytes32> random_seed() {
  Bytes32 seed{};
  FEDCASE_RETURN_IF_ERROR(random_bytes(seed.data(), seed.size()));
  return seed;
}

Result<KeyPair> generate_key_pair() {
  KeyPair pair;
  FEDCASE_RETURN_IF_ERROR(random_bytes(pair.private_key.data(), pair.private_key.size()));
  Result<Bytes32> pub = public_key_of(pair.private_key);
  if (!pub.ok()) return pub.status();
  pair.public_key = *pub;
  return pair;
}

Result<Bytes32> public_key_of(const Bytes32& raw) {
  Pkey key = private_key(raw);
  Bytes32 pub{};
  size_t size = pub.size();
  if (!key || EVP_PKEY_get_raw_public_key(key.get(), pub.data(), &size) != 1 ||
      size != pub.size()) {
    return openssl_failure("X25519 public key");
  }
  return pub;
}

void X25519Key::Free::operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }

Result<X25519Key> X25519Key::load(const Bytes32& raw) {
  X25519Key out;
  out.key_ = std::shared_ptr<EVP_PKEY>(private_key(raw).release(), Free());
  if (!out.key_) return openssl_failure("X25519 private key");
  return out;
}

Result<Bytes32> X25519Key::agree(const Bytes32& peer_public) const {
  Pkey peer(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer_public.data(),
                                        peer_public.size()));
  if (!peer) return openssl_failure("X25519 public key");
  PkeyCtx ctx(EVP_PKEY_CTX_new(key_.get(), nullptr));
  Bytes32 secret{};
  size_t size = secret.size();
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 ||
      EVP_PKEY_derive_set_peer(ctx.get(), peer.get()) != 1 ||
      EVP_PKEY_derive(ctx.get(), secret.data(), &size) != 1 || size != secret.size()) {
    // OpenSSL refuses a shared secret of all zeros (a low-order peer point), among others.
    return invalid_argument("X25519 agreement with this public key failed");
  }
  if (secret == Bytes32{}) return invalid_argument("X25519 agreement gave a zero secret");
  return secret;
}

namespace {

Pkey signing_key(const Bytes32& raw) {
  return Pkey(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, raw.data(), raw.size()));
}

struct MdCtxFree {
  void operator()(EVP_MD_CTX* p) const { EVP_MD_CTX_free(p); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

}  // namespace

Result<KeyPair> generate_signing_key() {
  KeyPair pair;
  FEDCASE_RETURN_IF_ERROR(random_bytes(pair.private_key.data(), pair.private_key.size()));
  Result<Bytes32> pub = signing_public_key_of(pair.private_key);
  if (!pub.ok()) return pub.status();
  pair.public_key = *pub;
  return pair;
}

Result<Bytes32> signing_public_key_of(const Bytes32& raw) {
  Pkey key = signing_key(raw);
  Bytes32 pub{};
  size_t size = pub.size();
  if (!key || EVP_PKEY_get_raw_public_key(key.get(), pub.data(), &size) != 1 ||
      size != pub.size()) {
    return openssl_failure("Ed25519 public key");
  }
  return pub;
}

Result<std::string> sign(const Bytes32& raw, std::string_view message) {
  Pkey key = signing_key(raw);
  MdCtx ctx(EVP_MD_CTX_new());
  std::string signature(kSignatureBytes, '\0');
  size_t size = signature.size();
  if (!key || !ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &size,
                     bytes(message), message.size()) != 1 ||
      size != kSignatureBytes) {
    return openssl_failure("Ed25519 signature");
  }
  return signature;
}

Status verify_signature(std::string_view public_key, std::string_view message,
                        std::string_view signature) {
  if (public_key.size() != 32 || signature.size() != kSignatureBytes) {
    return permission_denied("an Ed25519 signature is 64 bytes under a 32-byte public key");
  }
  Pkey key(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, bytes(public_key),
                                       public_key.size()));
  MdCtx ctx(EVP_MD_CTX_new());
  if (!key || !ctx ||
      EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestVerify(ctx.get(), bytes(signature), signature.size(), bytes(message),
                       message.size()) != 1) {
    return permission_denied("the Ed25519 signature does not verify");
  }
  return ok_status();
}

Result<Bytes32> agree(const Bytes32& own_private, const Bytes32& peer_public) {
  Result<X25519Key> key = X25519Key::load(own_private);
  if (!key.ok()) return key.status();
  return key->agree(peer_public);
}

Result<Bytes32> derive_key(const Bytes32& secret, std::string_view info) {
  std::unique_ptr<EVP_KDF, KdfFree> kdf(EVP_KDF_fetch(nullptr, "HKDF", nullptr));
  if (!kdf) return openssl_failure("HKDF fetch");
  std::unique_ptr<EVP_KDF_CTX, KdfCtxFree> ctx(EVP_KDF_CTX_new(kdf.get()));
  if (!ctx) return openssl_failure("HKDF context");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(secret.data()),
                                        secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()),
                                        info.size()),
      OSSL_PARAM_construct_end()};
  Bytes32 out{};
  if (EVP_KDF_derive(ctx.get(), out.data(), out.size(), params) != 1) {
    return openssl_failure("HKDF derive");
  }
  return out;
}

Bytes32 sha256(std::string_view data) {
  Bytes32 out{};
  unsigned int size = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &size, EVP_sha256(), nullptr);
  return out;
}

Result<std::string> seal(const Bytes32& key, std::string_view plaintext,
                         std::string_view associated_data) {
  std::string out(12 + plaintext.size() + 16, '\0');
  auto* nonce = reinterpret_cast<uint8_t*>(out.data());
  FEDCASE_RETURN_IF_ERROR(random_bytes(nonce, 12));
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  auto* body = reinterpret_cast<unsigned char*>(out.data() + 12);
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, bytes(associated_data),
                        static_cast<int>(associated_data.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), body, &len, bytes(plaintext),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), body + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, 16, body + plaintext.size()) != 1) {
    return openssl_failure("AES-GCM seal");
  }
  return out;
}

Result<std::string> open(const Bytes32& key, std::string_view sealed,
                         std::string_view associated_data) {
  if (sealed.size() < kAeadOverhead) return invalid_argument("the ciphertext is too short");
  const size_t size = sealed.size() - kAeadOverhead;
  std::string out(size, '\0');
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  if (!ctx) return openssl_failure("AES-GCM context");
  int len = 0;
  auto* plain = reinterpret_cast<unsigned char*>(out.data());
  std::string tag(sealed.substr(12 + size));
  const bool ok =
      EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), bytes(sealed)) == 1 &&
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, bytes(associated_data),
                        static_cast<int>(associated_data.size())) == 1 &&
      EVP_DecryptUpdate(ctx.get(), plain, &len, bytes(sealed) + 12, static_cast<int>(size)) == 1 &&
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, 16, tag.data()) == 1 &&
      EVP_DecryptFinal_ex(ctx.get(), plain + len, &len) == 1;
  if (!ok) return invalid_argument("the ciphertext does not authenticate");
  return out;
}

void append_u64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

}  // namespace fedcase::secagg
