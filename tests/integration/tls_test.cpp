// The coordinator over TLS and mutual TLS, with a throwaway CA: SDK clients train through it,
// and every wrong pairing (plain to TLS, TLS to plain, an untrusted or misnamed certificate, a
// missing client certificate) fails with a message that says what is wrong.

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include "client_sdk/fleet.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/raw_connection.h"
#include "tests/support/test_certificates.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

client::ConnectionOptions tls_to(uint16_t port, const std::string& ca,
                                 const std::string& host = "127.0.0.1") {
  client::ConnectionOptions options = client::plain_connection(host, port);
  options.ca_file = ca;
  return options;
}

// A small job that keeps committing rounds while clients train.
json small_job(int rounds) {
  return {{"name", "tls"},
          {"model", "mlp"},
          {"rounds", rounds},
          {"clients_per_round", 2},
          {"selection", {{"overcommit", 1.0}}},
          {"training", {{"lr", 0.05}, {"deadline", {{"mode", "fixed"}, {"seconds", 60}}}}}};
}

size_t committed(Caller& admin) {
  return committed_rounds(admin.get("/v1/admin/jobs/1").body).size();
}

// A TLS connection driven by hand with blocking OpenSSL calls: what a misbehaving TLS peer
// sends, byte for byte.
class RawTlsConnection {
 public:
  // `suites`: the TLS 1.3 cipher suites the client offers, in its order (empty: OpenSSL's).
  RawTlsConnection(uint16_t port, const std::string& ca, const std::string& suites = "")
      : context_(SSL_CTX_new(TLS_client_method())), fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    REQUIRE(SSL_CTX_load_verify_locations(context_, ca.c_str(), nullptr) == 1);
    if (!suites.empty()) REQUIRE(SSL_CTX_set_ciphersuites(context_, suites.c_str()) == 1);
    SSL_CTX_set_verify(context_, SSL_VERIFY_PEER, nullptr);
    sockaddr_in remote{};
    remote.sin_family = AF_INET;
    remote.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) == 0);
    timeval tv{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssl_ = SSL_new(context_);
    SSL_set_fd(ssl_, fd_);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), "127.0.0.1");
    REQUIRE(SSL_connect(ssl_) == 1);
  }
  ~RawTlsConnection() {
    SSL_free(ssl_);
    ::close(fd_);
    SSL_CTX_free(context_);
  }

  std::string cipher() const { return SSL_get_cipher_name(ssl_); }

  bool send(const std::string& bytes) {
    return SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size())) > 0;
  }
  // What arrives until the coordinator closes the connection or `max_bytes` have come.
  std::string read(size_t max_bytes = std::string::npos) {
    std::string out;
    char buffer[4096];
    while (out.size() < max_bytes) {
      const int n = SSL_read(ssl_, buffer, sizeof(buffer));
      if (n <= 0) break;
      out.append(buffer, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  SSL_CTX* context_;
  int fd_;
  SSL* ssl_ = nullptr;
};

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("TLS: clients train, a wrong pairing fails clearly, clients reconnect after a restart") {
  TempDir dir;
  TestCertificates certs(dir);
  auto use_tls = serving_tls(certs.server_cert, certs.server_key);
  auto service = start_coordinator(dir, use_tls);
  const uint16_t port = service->port();
  Caller admin(tls_to(port, certs.ca), kAdminToken);
  REQUIRE(admin.get("/v1/admin/jobs").status == 200);

  // Plain HTTP to the TLS port: a readable 400, not a reset.
  Caller plain(port, kAdminToken);
  Reply refused = plain.get("/v1/admin/jobs");
  CHECK(refused.status == 400);
  CHECK(refused.raw.find("speaks TLS") != std::string::npos);

  // An untrusted certificate, and a trusted one that does not name the host.
  Caller untrusted(tls_to(port, certs.other_ca), kAdminToken);
  Reply r = untrusted.get("/v1/admin/jobs");
  CHECK(r.status == 0);
  CHECK_MESSAGE(r.raw.find("certificate verify failed") != std::string::npos, r.raw);
  Caller misnamed(tls_to(port, certs.ca, "localhost"), kAdminToken);
  r = misnamed.get("/v1/admin/jobs");
  CHECK(r.status == 0);
  CHECK_MESSAGE(r.raw.find("certificate verify failed") != std::string::npos, r.raw);

  // A CA file that is not there is an error of the client's configuration.
  Caller no_ca(tls_to(port, dir.file("missing.pem")), kAdminToken);
  r = no_ca.get("/v1/admin/jobs");
  CHECK(r.status == 0);
  CHECK_MESSAGE(r.raw.find("CA file") != std::string::npos, r.raw);

  // SDK clients train over TLS.
  REQUIRE(admin.post("/v1/admin/jobs", small_job(40)).status == 201);
  ml::Dataset slice = ml::head(fmnist_train(), 600);
  client::FleetConfig fleet_config = test_fleet(port, 2, slice);
  fleet_config.coordinator = tls_to(port, certs.ca);
  auto fleet = client::Fleet::start(fleet_config);
  REQUIRE(fleet.ok());
  REQUIRE(wait_until([&] { return committed(admin) >= 2; }, 120));

  // The coordinator restarts on the same port and database; the clients carry on over TLS.
  service->stop();
  service.reset();
  service = start_coordinator(dir, [&](server::CoordinatorConfig& c) {
    use_tls(c);
    c.port = port;
  });
  Caller after_restart(tls_to(port, certs.ca), kAdminToken);
  const size_t at_restart = committed(after_restart);
  CHECK(at_restart >= 2);
  CHECK(wait_until([&] { return committed(after_restart) >= at_restart + 2; }, 120));
  (*fleet)->stop();
  CHECK((*fleet)->updates_accepted() >= 6);
}

TEST_CASE("mutual TLS: a client needs a certificate signed by the client CA") {
  TempDir dir;
  TestCertificates certs(dir);
  auto service = start_coordinator(dir, [&](server::CoordinatorConfig& c) {
    c.tls.cert_file = certs.server_cert;
    c.tls.key_file = certs.server_key;
    c.tls.client_ca_file = certs.ca;
  });
  const uint16_t port = service->port();

  Caller anonymous(tls_to(port, certs.ca), kAdminToken);
  Reply r = anonymous.get("/v1/admin/jobs");
  CHECK(r.status == 0);
  CHECK_MESSAGE(r.raw.find("requires a client certificate") != std::string::npos, r.raw);

  client::ConnectionOptions with_cert = tls_to(port, certs.ca);
  with_cert.cert_file = certs.client_cert;
  with_cert.key_file = certs.client_key;
  Caller identified(with_cert, kAdminToken);
  CHECK(identified.get("/v1/admin/jobs").status == 200);

  // The bearer token is still required: a certificate identifies a device, not a role.
  Caller no_token(with_cert, "");
  CHECK(no_token.get("/v1/admin/jobs").status == 401);
}

TEST_CASE("TLS: the server's cipher order; pipelined requests; silent and trickling peers cut") {
  TempDir dir;
  TestCertificates certs(dir);
  auto use_tls = serving_tls(certs.server_cert, certs.server_key);
  auto service = start_coordinator(dir, [&](server::CoordinatorConfig& c) {
    use_tls(c);
    c.idle_timeout_s = 0.5;
    c.read_timeout_s = 1;
  });
  const uint16_t port = service->port();
  std::signal(SIGPIPE, SIG_IGN);  // OpenSSL's socket writes to connections the server closed

  // The server's order of cipher suites decides, unless the client prefers ChaCha20.
  CHECK(RawTlsConnection(port, certs.ca).cipher() == "TLS_AES_128_GCM_SHA256");
  CHECK(
      RawTlsConnection(port, certs.ca, "TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256").cipher() ==
      "TLS_AES_128_GCM_SHA256");
  CHECK(RawTlsConnection(port, certs.ca, "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256")
            .cipher() == "TLS_CHACHA20_POLY1305_SHA256");

  // Three requests in one record: each is answered in order on the same connection.
  {
    RawTlsConnection c(port, certs.ca);
    const std::string get = "GET /v1/admin/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                            std::string(kAdminToken) + "\r\n\r\n";
    REQUIRE(c.send(get + get + get));
    const std::string answers = c.read();  // until the idle timeout closes the connection
    CHECK(count(answers, "HTTP/1.1 200 OK") == 3);
  }
  // A body over the limit is refused at its header; what the client still sends is read and
  // dropped until it has read the answer, which therefore arrives whole.
  {
    RawTlsConnection c(port, certs.ca);
    REQUIRE(
        c.send("POST /v1/clients/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: 3000000\r\n\r\n"));
    CHECK(c.send(std::string(512 * 1024, ' ')));
    const std::string answer = c.read();
    CHECK(answer.find("HTTP/1.1 413") == 0);
    CHECK(answer.find("exceeds the limit") != std::string::npos);
  }
  // A TCP connection that never starts its handshake is closed after idle_timeout_s.
  {
    RawConnection silent(port);
    const auto start = std::chrono::steady_clock::now();
    CHECK(silent.read().empty());
    CHECK(silent.closed());
    CHECK(seconds_since(start) < 3);
  }
  // After the handshake: saying nothing ends at idle_timeout_s, and a request header
  // trickled in pieces ends at read_timeout_s however often bytes come.
  {
    RawTlsConnection idle(port, certs.ca);
    const auto start = std::chrono::steady_clock::now();
    CHECK(idle.read().empty());
    CHECK(seconds_since(start) < 3);
  }
  {
    RawTlsConnection loris(port, certs.ca);
    REQUIRE(loris.send("GET /v1/admin/jobs HTTP/1.1\r\n"));
    const auto start = std::chrono::steady_clock::now();
    bool open = true;
    while (open && seconds_since(start) < 5) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      open = loris.send("X-Slow: 1\r\n");
    }
    CHECK_FALSE(open);
    CHECK(seconds_since(start) < 3);
  }
  // The server still serves TLS clients afterwards.
  Caller admin(tls_to(port, certs.ca), kAdminToken);
  CHECK(admin.get("/v1/admin/jobs").status == 200);
}

TEST_CASE("TLS: a plain client on a plain port is told the port does not speak TLS") {
  TempDir dir;
  TestCertificates certs(dir);
  auto service = start_coordinator(dir);
  Caller tls_client(tls_to(service->port(), certs.ca), kAdminToken);
  Reply r = tls_client.get("/v1/admin/jobs");
  CHECK(r.status == 0);
  CHECK_MESSAGE(r.raw.find("plain HTTP") != std::string::npos, r.raw);
}

TEST_CASE("TLS: a missing or mismatched server key stops the coordinator at start") {
  TempDir dir;
  TestCertificates certs(dir);
  server::CoordinatorConfig config = test_config(dir);
  config.tls.cert_file = certs.server_cert;
  config.tls.key_file = certs.client_key;
  auto mismatched = server::CoordinatorService::start(config);
  REQUIRE_FALSE(mismatched.ok());
  CHECK(mismatched.status().message().find("tls.key_file") != std::string::npos);
  CHECK(mismatched.status().message().find("mismatch") != std::string::npos);
  config.tls.key_file = dir.file("nope.key");
  auto missing = server::CoordinatorService::start(config);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("tls.key_file") != std::string::npos);
}
