#include "aggregation/validation.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "test_util.h"

using namespace fedcase;
using namespace fedcase::aggregation;

namespace {

// Validates `update` as the coordinator does: encoded, viewed, then checked.
Status validate(const ModelLayout& expected, const ModelBlob& update, UpdateBounds bounds) {
  const std::string bytes = encode_blob(update);
  BlobView view;
  REQUIRE(view_blob(bytes, 1 << 20, view).ok());
  return validate_update(expected, view, bounds);
}

}  // namespace

TEST_CASE("validation accepts a matching finite update within the bound") {
  ModelLayout layout{{{"w", {2}}}};
  ModelBlob u{0, layout, {3, 4}};
  CHECK(validate(layout, u, {}).ok());
  CHECK(validate(layout, u, {5.0}).ok());
  CHECK(l2_norm(u.data.data(), 2) == doctest::Approx(5.0));
}

TEST_CASE("validation rejects wrong shape, non-finite values and large norms") {
  ModelLayout layout{{{"w", {2}}}};
  ModelBlob shape{0, {{{"w", {1, 2}}}}, {1, 1}};
  CHECK(validate(layout, shape, {}).code() == Code::kUnprocessable);
  ModelBlob nan{0, layout, {1, std::nanf("")}};
  CHECK(validate(layout, nan, {}).message().find("not finite") != std::string::npos);
  CHECK(validate(layout, nan, {}).message().find("value 1 ") != std::string::npos);
  ModelBlob inf{0, layout, {std::numeric_limits<float>::infinity(), 1}};
  CHECK(validate(layout, inf, {}).code() == Code::kUnprocessable);
  ModelBlob big{0, layout, {30, 40}};
  CHECK(validate(layout, big, {49.9}).message().find("norm") != std::string::npos);
}

TEST_CASE("values read a piece at a time are checked as a viewed update's are, in one pass") {
  using fedcase::aggregation::testing::VectorReader;
  const size_t n = 3 * kDecodePiece + 5;
  std::vector<float> values(n, 0.001f);  // a norm of 0.11
  values[n - 1] = 1000;  // a buffer: not in the norm
  const VectorReader reader(values);
  CHECK(validate_values(reader.values(), n, n - 1, {1.0}).ok());
  CHECK(reader.reads() == 4);
  values[2] = 100;
  CHECK(validate_values(reader.values(), n, n - 1, {1.0}).message().find("exceeds the bound") !=
        std::string::npos);
  values[kDecodePiece + 3] = std::nanf("");
  const size_t reads_before = reader.reads();
  CHECK(validate_values(reader.values(), n, n - 1, {}).message() ==
        "update value " + std::to_string(kDecodePiece + 3) + " is not finite");
  CHECK(reader.reads() - reads_before == 2);  // nothing is read past the first bad value
  const VectorReader failing(values, kDecodePiece);
  CHECK(validate_values(failing.values(), n, n - 1, {}).code() == Code::kInternal);
}
