#pragma once
// The coordinator's TLS context (OpenSSL through Boost.Asio): TLS 1.2 and 1.3 only, forward-
// secret AEAD cipher suites only, in the server's order (AES-128-GCM first, ChaCha20-Poly1305
// for a client that prefers it), and with a client CA file, mutual TLS (a client without a
// certificate signed by that CA fails the handshake).

#include <boost/asio/ssl/context.hpp>
#include <memory>

#include "common/status.h"
#include "server/core/base/config.h"

namespace fedcase::server {

// kInvalidArgument naming the file and OpenSSL's reason when a certificate, key or CA file
// cannot be loaded, or the key does not belong to the certificate.
// Precondition: tls.enabled().
Result<std::shared_ptr<boost::asio::ssl::context>> make_server_tls_context(const TlsConfig& tls);

}  // namespace fedcase::server
