#include "sim/fleet.h"

#include <doctest/doctest.h>

#include <cmath>

#include "sim/random.h"

namespace fedcase::sim {
namespace {

std::vector<Bandwidth> small_trace() { return {{1000, 100}, {50000, 10000}, {200000, 20000}}; }

std::vector<uint8_t> balanced_labels(size_t n) {
  std::vector<uint8_t> labels(n);
  for (size_t i = 0; i < n; ++i) labels[i] = uint8_t(i % 10);
  return labels;
}

TEST_CASE("the bandwidth trace parses and rejects malformed lines") {
  auto trace = parse_bandwidth_trace("dl_kbps,ul_kbps\n100.5,20\r\n300,4\n");
  REQUIRE(trace.ok());
  REQUIRE(trace->size() == 2);
  CHECK(trace->at(0).download_kbps == doctest::Approx(100.5));
  CHECK(trace->at(1).upload_kbps == doctest::Approx(4));
  CHECK(parse_bandwidth_trace("dl_kbps,ul_kbps\n100,x\n").status().code() == Code::kInvalidArgument);
  CHECK(parse_bandwidth_trace("dl_kbps,ul_kbps\n").status().code() == Code::kInvalidArgument);
}

TEST_CASE("drawn devices are deterministic and survive a CSV round trip") {
  FleetParams p;
  p.clients = 40;
  std::vector<DeviceRow> a = draw_devices(p, small_trace());
  std::vector<DeviceRow> b = draw_devices(p, small_trace());
  REQUIRE(a.size() == 40);
  CHECK(fleet_csv(a) == fleet_csv(b));
  for (const DeviceRow& d : a) {
    CHECK(d.samples >= p.min_samples);
    CHECK(d.samples <= p.max_samples);
    CHECK(d.cache_bytes == uint64_t(p.cache_fraction * double(d.samples * d.sample_bytes)));
  }
  auto parsed = parse_fleet_csv(fleet_csv(a));
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == a.size());
  CHECK(fleet_csv(*parsed) == fleet_csv(a));
  CHECK(parse_fleet_csv("samples\n1\n").status().code() == Code::kInvalidArgument);
  CHECK(parse_fleet_csv(fleet_csv_header() + "\n1,2,3,4,5,6,7,8,9\n").status().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("fleet params reject unknown keys and bad ranges") {
  CHECK(parse_fleet_params({{"clients", 10}, {"availability", {{"amplitude", 0.2}}}}).ok());
  CHECK(!parse_fleet_params({{"clientz", 10}}).ok());
  CHECK(!parse_fleet_params({{"min_samples", 50}, {"max_samples", 10}}).ok());
  CHECK(!parse_fleet_params({{"bandwidth_draw", "sorted"}}).ok());
}

TEST_CASE("built clients draw their samples from the label set and alternate spells") {
  FleetParams p;
  p.clients = 30;
  p.label_alpha = 0.1;
  p.availability.horizon_s = 20000;
  std::vector<uint8_t> labels = balanced_labels(1000);
  auto fleet = build_fleet(draw_devices(p, small_trace()), p, labels);
  REQUIRE(fleet.ok());
  for (const SimClient& c : *fleet) {
    CHECK(c.samples.size() == c.device.samples);
    for (size_t s : c.samples) CHECK(s < labels.size());
    const auto& t = c.spells.toggles();
    REQUIRE(!t.empty());
    CHECK(t.back() >= p.availability.horizon_s);
    for (size_t k = 0; k + 1 < t.size(); ++k) {
      CHECK(t[k] < t[k + 1]);
      CHECK(c.spells.online_at(t[k]) != c.spells.online_at(t[k + 1]));
    }
    const double mid = t[0] / 2;
    if (c.spells.online_at(mid)) CHECK(c.spells.online_until(mid) == t[0]);
  }
  CHECK(!build_fleet({}, p, labels).ok());
}

TEST_CASE("a Dirichlet draw lies on the simplex") {
  Rng rng(3);
  for (double alpha : {0.05, 0.5, 5.0}) {
    std::vector<double> x = dirichlet(rng, alpha, 10);
    double sum = 0;
    for (double v : x) {
      CHECK(v >= 0);
      sum += v;
    }
    CHECK(sum == doctest::Approx(1));
  }
}

}  // namespace
}  // namespace fedcase::sim
