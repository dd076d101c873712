#pragma once
// Throwaway TLS material for tests and benchmarks, made with the openssl command line in a
// TempDir: a CA, a server certificate it signs for the IP address 127.0.0.1 only, a client
// certificate it signs, and a second, unrelated CA. ECDSA P-256 keys, valid for two days.

#include <string>

#include "tests/support/temp_dir.h"

namespace fedcase::testing {

struct TestCertificates {
  // Writes the files into `dir`, which must outlive their use. Throws std::runtime_error
  // naming the command that failed.
  explicit TestCertificates(const TempDir& dir);

  // Paths of the PEM files in `dir`.
  std::string ca, server_cert, server_key, client_cert, client_key, other_ca;
};

}  // namespace fedcase::testing
