#include "server/api/client_query.h"

#include <doctest/doctest.h>

#include <cmath>

using namespace fedcase;
using namespace fedcase::server;

namespace {

ClientSummary client(ClientId id, bool available, std::map<JobId, double> durations,
                     double utility = 0, std::string device = "phone") {
  ClientSummary c;
  c.record.id = id;
  c.record.info = {{"device", {{"model", device}}}};
  c.profile.id = id;
  c.available = available;
  c.expected_duration_s = std::move(durations);
  if (utility > 0) {
    c.profile.utility = utility;
    c.profile.utility_round = 1;
  }
  return c;
}

std::vector<ClientId> ids(const ClientPage& page) {
  std::vector<ClientId> out;
  for (const ClientSummary* c : page.clients) out.push_back(c->record.id);
  return out;
}

ClientQuery query(std::map<std::string, std::string> params) {
  auto q = parse_client_query(params);
  REQUIRE_MESSAGE(q.ok(), q.status().to_string());
  return *q;
}

}  // namespace

TEST_CASE("parameters are validated, naming the one that is wrong") {
  CHECK(parse_client_query({}).ok());
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"limit", "1001"},
                                                        {"limit", "-1"},
                                                        {"offset", "x"},
                                                        {"sort", "token_hash"},
                                                        {"order", "up"},
                                                        {"available", "1"},
                                                        {"job", "1.5"},
                                                        {"colour", "red"},
                                                        {"search", std::string(201, 'a')}}) {
    auto q = parse_client_query({{key, value}});
    REQUIRE_FALSE(q.ok());
    CHECK(q.status().code() == Code::kInvalidArgument);
    CHECK(q.status().message().find(key) != std::string::npos);
  }
}

TEST_CASE("pages sort by a column, unknown values last, ties by id") {
  const std::vector<ClientSummary> fleet = {
      client(1, true, {{7, 30.0}}, 0.2),  client(2, true, {{7, 10.0}}),
      client(3, false, {{7, 20.0}}, 0.9), client(4, true, {}, 0.5),
      client(5, true, {{7, 10.0}}, 0.1),
  };
  CHECK(ids(select_clients(fleet, query({}))) == std::vector<ClientId>{1, 2, 3, 4, 5});
  CHECK(ids(select_clients(fleet, query({{"sort", "expected_duration_s"}}))) ==
        std::vector<ClientId>{2, 5, 3, 1, 4});
  CHECK(ids(select_clients(fleet, query({{"sort", "expected_duration_s"}, {"order", "desc"}}))) ==
        std::vector<ClientId>{1, 3, 2, 5, 4});
  CHECK(ids(select_clients(fleet, query({{"sort", "utility"}, {"order", "desc"}}))) ==
        std::vector<ClientId>{3, 4, 1, 5, 2});
  CHECK(ids(select_clients(fleet, query({{"sort", "client_id"}, {"order", "desc"}}))) ==
        std::vector<ClientId>{5, 4, 3, 2, 1});
  // Consecutive pages cover the sorted listing exactly once.
  auto first = select_clients(fleet, query({{"sort", "expected_duration_s"}, {"limit", "2"}}));
  auto second = select_clients(
      fleet, query({{"sort", "expected_duration_s"}, {"limit", "2"}, {"offset", "2"}}));
  auto last = select_clients(
      fleet, query({{"sort", "expected_duration_s"}, {"limit", "2"}, {"offset", "4"}}));
  CHECK(ids(first) == std::vector<ClientId>{2, 5});
  CHECK(ids(second) == std::vector<ClientId>{3, 1});
  CHECK(ids(last) == std::vector<ClientId>{4});
  CHECK(ids(select_clients(fleet, query({{"offset", "9"}}))).empty());
  CHECK(first.total == 5);
  CHECK(first.matched == 5);
}

TEST_CASE("filters by availability and by text in the id or device") {
  const std::vector<ClientSummary> fleet = {client(1, true, {}, 0, "pixel"),
                                            client(12, false, {}, 0, "iphone"),
                                            client(3, true, {}, 0, "pixel-tablet")};
  auto offline = select_clients(fleet, query({{"available", "false"}}));
  CHECK(ids(offline) == std::vector<ClientId>{12});
  CHECK(offline.matched == 1);
  CHECK(offline.total == 3);
  CHECK(ids(select_clients(fleet, query({{"search", "pixel"}}))) == std::vector<ClientId>{1, 3});
  CHECK(ids(select_clients(fleet, query({{"search", "1"}}))) == std::vector<ClientId>{1, 12});
}

TEST_CASE("the histogram bins the matching clients' expected durations for one job") {
  std::vector<ClientSummary> fleet;
  for (ClientId id = 1; id <= 40; ++id) {
    fleet.push_back(client(id, id % 2 == 0, {{3, double(id)}, {9, 1.0}}));
  }
  fleet.push_back(client(41, true, {}));
  auto all = select_clients(fleet, query({}));
  REQUIRE(all.histogram.job);
  CHECK(*all.histogram.job == 3);  // the lowest job id with durations
  REQUIRE(all.histogram.counts.size() == 20);
  REQUIRE(all.histogram.edges.size() == 21);
  CHECK(all.histogram.edges.front() == doctest::Approx(1));
  CHECK(all.histogram.edges.back() == doctest::Approx(40));
  size_t binned = 0;
  for (size_t n : all.histogram.counts) binned += n;
  CHECK(binned == 40);
  auto available = select_clients(fleet, query({{"available", "true"}, {"job", "3"}}));
  binned = 0;
  for (size_t n : available.histogram.counts) binned += n;
  CHECK(binned == 20);
  auto one_value = select_clients(fleet, query({{"job", "9"}}));
  CHECK(one_value.histogram.counts.front() == 40);  // all durations equal: one full bucket
  auto none = select_clients(fleet, query({{"job", "5"}}));
  CHECK(none.histogram.counts.empty());
}
