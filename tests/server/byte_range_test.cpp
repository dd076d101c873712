// The byte range a download asks for (server/api/byte_range.h).

#include "server/api/byte_range.h"

#include <doctest/doctest.h>

namespace fedcase::server {
namespace {

using Kind = RangeAsked::Kind;

TEST_CASE("one byte range is honoured, clamped to the body; anything else asks for it whole") {
  auto range = [](const char* header, uint64_t size) { return read_range(header, size); };
  CHECK(range("bytes=10-", 100).kind == Kind::kRange);
  CHECK(range("bytes=10-", 100).range == ByteRange{10, 99});
  CHECK(range("bytes=10-19", 100).range == ByteRange{10, 19});
  CHECK(range("bytes=10-19", 100).range.length() == 10);
  CHECK(range("bytes=90-1000", 100).range == ByteRange{90, 99});
  CHECK(range("bytes=-5", 100).range == ByteRange{95, 99});
  CHECK(range("bytes=-500", 100).range == ByteRange{0, 99});
  CHECK(range("bytes=100-", 100).kind == Kind::kUnsatisfiable);
  CHECK(range("bytes=200-300", 100).kind == Kind::kUnsatisfiable);
  for (const char* whole : {"", "bytes=", "bytes=-", "bytes=-0", "bytes=5", "bytes=a-", "bytes=5-a",
                            "bytes=9-3", "bytes=0-1,5-6", "items=0-5", "bytes= 0-5",
                            "bytes=99999999999999999999-"}) {
    CAPTURE(whole);
    CHECK(range(whole, 100).kind == Kind::kWhole);
  }
  CHECK(read_range(std::nullopt, 100).kind == Kind::kWhole);
  CHECK(range("bytes=0-", 0).kind == Kind::kWhole);  // nothing to cut
}

}  // namespace
}  // namespace fedcase::server
