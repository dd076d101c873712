#include "protocol/check_in.h"

#include <doctest/doctest.h>

using namespace fedcase;
using namespace fedcase::protocol;

TEST_CASE("a check-in window is written with milliseconds and read back") {
  const CheckIn c{12.5, 37.25, 30};
  CHECK(write_check_in(c) == "after=12.500, before=37.250, reconnect=30.000");
  Result<CheckIn> back = read_check_in(write_check_in(c));
  REQUIRE(back.ok());
  CHECK(*back == c);
  CHECK(read_check_in("after=0, before=0, reconnect=0").ok());
  CHECK(read_check_in("after=3, before=4.5, reconnect=86400")->before_s == 4.5);
}

TEST_CASE("a malformed or out-of-range check-in window is refused") {
  for (const char* bad :
       {"", "after=1, before=2", "after=1, before=2, reconnect=3, x=4",
        "after=1,before=2,reconnect=3", "before=2, after=1, reconnect=3",
        "after=-1, before=2, reconnect=3", "after=1e3, before=2e3, reconnect=3",
        "after=2, before=1, reconnect=3", "after=1, before=90000, reconnect=3",
        "after=1, before=2, reconnect=90000", "after=1., before=2, reconnect=3",
        "after=.5, before=2, reconnect=3", "after=nan, before=2, reconnect=3",
        "after=1, before=2, reconnect=3 ", "after=1234567890, before=2, reconnect=3"}) {
    Result<CheckIn> read = read_check_in(bad);
    CHECK_MESSAGE(!read.ok(), bad);
    if (!read.ok()) CHECK(read.status().code() == Code::kInvalidArgument);
  }
}
