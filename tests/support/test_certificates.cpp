#include "tests/support/test_certificates.h"

#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace fedcase::testing {
namespace {

void run(const std::string& command) {
  if (std::system((command + " >/dev/null 2>&1").c_str()) != 0) {
    throw std::runtime_error("cannot make test certificates: " + command);
  }
}

}  // namespace

TestCertificates::TestCertificates(const TempDir& dir)
    : ca(dir.file("ca.pem")),
      server_cert(dir.file("server.pem")),
      server_key(dir.file("server.key")),
      client_cert(dir.file("client.pem")),
      client_key(dir.file("client.key")),
      other_ca(dir.file("other-ca.pem")) {
  const std::string d = dir.path().string() + "/";
  std::ofstream(d + "server.ext") << "subjectAltName=IP:127.0.0.1\n";
  std::ofstream(d + "client.ext") << "extendedKeyUsage=clientAuth\n";
  const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  auto self_signed = [&](const std::string& name, const std::string& cn) {
    run("openssl req -x509" + key + " -keyout " + d + name + ".key -out " + d + name +
        ".pem -days 2 -subj '/CN=" + cn + "'");
  };
  auto signed_by_ca = [&](const std::string& name) {
    run("openssl req" + key + " -keyout " + d + name + ".key -out " + d + name +
        ".csr -subj '/CN=fedcase " + name + "'");
    run("openssl x509 -req -in " + d + name + ".csr -CA " + ca + " -CAkey " + d +
        "ca.key -CAcreateserial -days 2 -out " + d + name + ".pem -extfile " + d + name + ".ext");
  };
  self_signed("ca", "fedcase test CA");
  self_signed("other-ca", "unrelated CA");
  signed_by_ca("server");
  signed_by_ca("client");
}

}  // namespace fedcase::testing
