#include "aggregation/validation.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

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
