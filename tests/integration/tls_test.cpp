// The coordinator over TLS and mutual TLS, with a throwaway CA: SDK clients train through it,
// and every wrong pairing (plain to TLS, TLS to plain, an untrusted or misnamed certificate, a
// missing client certificate) fails with a message that says what is wrong.

#include <doctest/doctest.h>

#include "client_sdk/fleet.h"
#include "tests/support/coordinator_harness.h"
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
