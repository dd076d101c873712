#include "scheduling/duration.h"

#include <doctest/doctest.h>

using namespace fedcase;
using namespace fedcase::scheduling;

namespace {

ClientProfile measured(double hit_ratio) {
  ClientProfile p;
  p.compute_ms_per_sample.fold(2, 0.3);
  p.download_bytes_per_s.fold(1e6, 0.3);
  p.upload_bytes_per_s.fold(5e5, 0.3);
  p.storage_read_bytes_per_s.fold(1e6, 0.3);
  p.sample_bytes.fold(1000, 0.3);
  p.cache_hit_ratio.fold(hit_ratio, 0.3);
  return p;
}

const TaskShape kTask{1000, 2000000, 2000000};

}  // namespace

TEST_CASE("expected duration adds compute, I/O after cache hits, download and upload") {
  ExpectedDuration d = expected_duration(measured(0.75), kTask);
  CHECK(d.compute_s == doctest::Approx(2.0));   // 1000 samples x 2 ms
  CHECK(d.io_s == doctest::Approx(0.25));       // 250 misses x 1000 B / 1 MB/s
  CHECK(d.download_s == doctest::Approx(2.0));  // 2 MB / 1 MB/s
  CHECK(d.upload_s == doctest::Approx(4.0));    // 2 MB / 0.5 MB/s
  CHECK(d.total_s() == doctest::Approx(8.25));
}

TEST_CASE("a better cache hit ratio shortens only the I/O part") {
  ExpectedDuration cold = expected_duration(measured(0.0), kTask);
  ExpectedDuration warm = expected_duration(measured(0.9), kTask);
  CHECK(cold.io_s == doctest::Approx(1.0));
  CHECK(warm.io_s == doctest::Approx(0.1));
  CHECK(cold.compute_s == warm.compute_s);
  CHECK(cold.total_s() - warm.total_s() == doctest::Approx(0.9));
}

TEST_CASE("priors stand in for what a profile has not measured") {
  DurationPriors priors;
  priors.compute_ms_per_sample = 10;
  priors.download_bytes_per_s = 2e6;
  priors.upload_bytes_per_s = 1e6;
  priors.storage_read_bytes_per_s = 4e6;
  priors.sample_bytes = 2000;
  priors.cache_hit_ratio = 0.5;
  ClientProfile fresh;
  ExpectedDuration d = expected_duration(fresh, kTask, priors);
  CHECK(d.compute_s == doctest::Approx(10));
  CHECK(d.io_s == doctest::Approx(500 * 2000 / 4e6));
  CHECK(d.download_s == doctest::Approx(1));
  CHECK(d.upload_s == doctest::Approx(2));

  ClientProfile partly;
  partly.compute_ms_per_sample.fold(1, 0.3);
  CHECK(expected_duration(partly, kTask, priors).compute_s == doctest::Approx(1));
  CHECK(expected_duration(partly, kTask, priors).download_s == doctest::Approx(1));
}

TEST_CASE("duration priors parse with defaults and reject bad values") {
  Result<DurationPriors> defaults = parse_duration_priors(nlohmann::json::object(), "priors");
  REQUIRE(defaults.ok());
  CHECK(defaults->sample_bytes == 784);
  Result<DurationPriors> set = parse_duration_priors({{"compute_ms_per_sample", 8}}, "priors");
  REQUIRE(set.ok());
  CHECK(set->compute_ms_per_sample == 8);
  CHECK_FALSE(parse_duration_priors({{"compute_ms_per_sample", 0}}, "priors").ok());
  CHECK_FALSE(parse_duration_priors({{"cache_hit_ratio", 2}}, "priors").ok());
  Result<DurationPriors> typo = parse_duration_priors({{"uplaod_bytes_per_s", 1}}, "x.priors");
  REQUIRE_FALSE(typo.ok());
  CHECK(typo.status().message() == "unknown key x.priors.uplaod_bytes_per_s");
}
