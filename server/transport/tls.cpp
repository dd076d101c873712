#include "server/transport/tls.h"

#include <openssl/ssl.h>

#include "common/crypto.h"

namespace fedcase::server {
namespace {

namespace ssl = boost::asio::ssl;

// The server's order, for TLS 1.3 and 1.2 alike: AES-128-GCM first (about 30% faster than
// AES-256-GCM with AES instructions, on both ends), then AES-256-GCM, then ChaCha20-Poly1305,
// which a client that lists it first gets anyway (devices without AES instructions do).
constexpr const char* kTls13Suites =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";
// ECDHE key exchange with AES-GCM or ChaCha20-Poly1305 for TLS 1.2.
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

}  // namespace

Result<std::shared_ptr<ssl::context>> make_server_tls_context(const TlsConfig& tls) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = context->native_handle();
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                       ssl::context::single_dh_use);
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  if (SSL_CTX_set_cipher_list(native, kTls12Ciphers) != 1 ||
      SSL_CTX_set_ciphersuites(native, kTls13Suites) != 1) {
    return internal_error("OpenSSL accepts none of the cipher suites");
  }
  SSL_CTX_set_options(native, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA);
  boost::system::error_code ec;
  auto load = [&](const std::string& what, const std::string& file, auto&& step) -> Status {
    step(ec);
    if (!ec) return ok_status();
    return invalid_argument("tls." + what + " '" + file + "': " + take_openssl_error(ec.message()));
  };
  FEDCASE_RETURN_IF_ERROR(load("cert_file", tls.cert_file, [&](auto& e) {
    context->use_certificate_chain_file(tls.cert_file, e);
  }));
  FEDCASE_RETURN_IF_ERROR(load("key_file", tls.key_file, [&](auto& e) {
    context->use_private_key_file(tls.key_file, ssl::context::pem, e);
  }));
  // Loading checks the key against a certificate of its own type only (an EC key with an RSA
  // certificate loads, then fails every handshake).
  if (SSL_CTX_check_private_key(native) != 1) {
    return invalid_argument("tls.key_file '" + tls.key_file + "': " +
                            take_openssl_error("does not match the certificate in tls.cert_file"));
  }
  if (!tls.client_ca_file.empty()) {
    FEDCASE_RETURN_IF_ERROR(load("client_ca_file", tls.client_ca_file, [&](auto& e) {
      context->load_verify_file(tls.client_ca_file, e);
    }));
    context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  return context;
}

}  // namespace fedcase::server
