#include "server/core/base/metrics.h"

#include <doctest/doctest.h>

#include <string>

using fedcase::server::Metrics;
namespace metric = fedcase::server::metric;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

}  // namespace

TEST_CASE("counters add per label set and render with HELP and TYPE") {
  Metrics m;
  m.add(metric::kHttpRequests, {{"route", "/v1/task"}, {"code", "204"}});
  m.add(metric::kHttpRequests, {{"route", "/v1/task"}, {"code", "204"}}, 2);
  m.add(metric::kHttpRequests, {{"route", "/metrics"}, {"code", "200"}});
  m.add(metric::kHttpSentBytes, {}, 1e12);
  CHECK(m.value(metric::kHttpRequests, {{"route", "/v1/task"}, {"code", "204"}}) == 3);
  const std::string text = m.render();
  CHECK(has_line(text, "# TYPE fedcase_http_requests_total counter"));
  CHECK(has_line(text, "fedcase_http_requests_total{route=\"/v1/task\",code=\"204\"} 3"));
  CHECK(has_line(text, "fedcase_http_requests_total{route=\"/metrics\",code=\"200\"} 1"));
  CHECK(has_line(text, "fedcase_http_sent_bytes_total 1000000000000"));
}

TEST_CASE("a counter never goes down and kinds are not mixed up") {
  Metrics m;
  m.add(metric::kUpdatesAccepted, {}, 2);
  m.add(metric::kUpdatesAccepted, {}, -1);
  m.set(metric::kUpdatesAccepted, {}, 0);        // not a gauge: ignored
  m.observe(metric::kUpdatesAccepted, {}, 1);    // not a histogram: ignored
  m.add("fedcase_no_such_family_total", {}, 1);  // undeclared: ignored
  CHECK(m.value(metric::kUpdatesAccepted, {}) == 2);
  // A count copied from elsewhere only raises the counter.
  m.set_count(metric::kUpdatesAccepted, {}, 5);
  m.set_count(metric::kUpdatesAccepted, {}, 4);
  m.set_count(metric::kClientsConnected, {}, 7);  // a gauge: ignored
  CHECK(m.value(metric::kUpdatesAccepted, {}) == 5);
  CHECK(m.value(metric::kClientsConnected, {}) == 0);
  CHECK(m.render().find("fedcase_no_such_family") == std::string::npos);
}

TEST_CASE("histograms count cumulative buckets, sum and count") {
  Metrics m;
  for (double v : {0.0003, 0.002, 0.002, 7.0, 1e9}) {
    m.observe(metric::kStoreWriteSeconds, {{"operation", "commit_round"}}, v);
  }
  m.observe(metric::kStoreWriteSeconds, {{"operation", "commit_round"}}, 0.0 / 0.0);  // dropped
  const std::string text = m.render();
  const std::string series = "fedcase_store_write_seconds";
  CHECK(has_line(text, "# TYPE " + series + " histogram"));
  CHECK(has_line(text, series + "_bucket{operation=\"commit_round\",le=\"0.0001\"} 0"));
  CHECK(has_line(text, series + "_bucket{operation=\"commit_round\",le=\"0.0005\"} 1"));
  CHECK(has_line(text, series + "_bucket{operation=\"commit_round\",le=\"0.0025\"} 3"));
  CHECK(has_line(text, series + "_bucket{operation=\"commit_round\",le=\"2.5\"} 3"));
  CHECK(has_line(text, series + "_bucket{operation=\"commit_round\",le=\"+Inf\"} 5"));
  CHECK(has_line(text, series + "_count{operation=\"commit_round\"} 5"));
  CHECK(m.value(metric::kStoreWriteSeconds, {{"operation", "commit_round"}}) == 5);
}

TEST_CASE("label values are escaped") {
  Metrics m;
  m.set(metric::kJobs, {{"state", "a\"b\\c\nd"}}, 1);
  CHECK(has_line(m.render(), "fedcase_jobs{state=\"a\\\"b\\\\c\\nd\"} 1"));
}

TEST_CASE("collectors set gauges at each render until their registration goes") {
  Metrics m;
  int calls = 0;
  {
    auto registration = m.add_collector([&calls](Metrics& metrics) {
      ++calls;
      metrics.clear(metric::kJobTestAccuracy);
      metrics.set(metric::kJobTestAccuracy, {{"job", std::to_string(calls)}}, 0.5);
    });
    m.render();
    const std::string text = m.render();
    CHECK(calls == 2);
    CHECK(has_line(text, "fedcase_job_test_accuracy{job=\"2\"} 0.5"));
    CHECK(text.find("job=\"1\"") == std::string::npos);  // cleared before the second render
  }
  m.render();
  CHECK(calls == 2);
}
