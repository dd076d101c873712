#include <doctest/doctest.h>

#include "common/status.h"

using namespace fedcase;

TEST_CASE("status codes map to HTTP statuses") {
  CHECK(http_status(Code::kOk) == 200);
  CHECK(http_status(Code::kUnauthenticated) == 401);
  CHECK(http_status(Code::kPermissionDenied) == 403);
  CHECK(http_status(Code::kConflict) == 409);
  CHECK(http_status(Code::kTooLarge) == 413);
  CHECK(http_status(Code::kUnprocessable) == 422);
  CHECK(http_status(Code::kResourceExhausted) == 429);
  CHECK(http_status(Code::kUnavailable) == 503);
  CHECK(std::string(code_name(Code::kUnprocessable)) == "unprocessable");
}

TEST_CASE("result holds a value or an error") {
  Result<int> good = 7;
  REQUIRE(good.ok());
  CHECK(*good == 7);
  Result<int> bad = not_found("no such job");
  CHECK_FALSE(bad.ok());
  CHECK(bad.status().code() == Code::kNotFound);
  CHECK(bad.status().to_string() == "not_found: no such job");
  Result<int> misuse = Status();
  CHECK(misuse.status().code() == Code::kInternal);
}
