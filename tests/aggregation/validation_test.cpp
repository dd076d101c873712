#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "aggregation/validation.h"

using namespace fedcase;
using namespace fedcase::aggregation;

TEST_CASE("validation accepts a matching finite update within the bound") {
  ModelLayout layout{{{"w", {2}}}};
  ModelBlob u{0, layout, {3, 4}};
  CHECK(validate_update(layout, u, {}).ok());
  CHECK(validate_update(layout, u, {5.0}).ok());
  CHECK(l2_norm(u.data.data(), 2) == doctest::Approx(5.0));
}

TEST_CASE("validation rejects wrong shape, non-finite values and large norms") {
  ModelLayout layout{{{"w", {2}}}};
  ModelBlob shape{0, {{{"w", {1, 2}}}}, {1, 1}};
  CHECK(validate_update(layout, shape, {}).code() == Code::kUnprocessable);
  ModelBlob nan{0, layout, {1, std::nanf("")}};
  CHECK(validate_update(layout, nan, {}).message().find("not finite") != std::string::npos);
  ModelBlob inf{0, layout, {std::numeric_limits<float>::infinity(), 1}};
  CHECK(validate_update(layout, inf, {}).code() == Code::kUnprocessable);
  ModelBlob big{0, layout, {30, 40}};
  CHECK(validate_update(layout, big, {49.9}).message().find("norm") != std::string::npos);
}
