#include "common/crypto.h"

#include <doctest/doctest.h>

using namespace fedcase;

TEST_CASE("digests in hex and in base64") {
  // RFC 4648's test vectors, spelled in hex.
  CHECK(hex_to_base64("") == "");
  CHECK(hex_to_base64("66") == "Zg==");
  CHECK(hex_to_base64("666f") == "Zm8=");
  CHECK(hex_to_base64("666F6F") == "Zm9v");
  CHECK(hex_to_base64("666f6f626172") == "Zm9vYmFy");
  // SHA-256 of "abc" (FIPS 180-2), and the same digest as an HTTP Repr-Digest carries it.
  const std::string abc = sha256_hex("abc");
  CHECK(abc == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex_to_base64(abc) == "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=");
}
