#include "server/core/base/config.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <stdexcept>

using namespace fedcase;
using namespace fedcase::server;
using nlohmann::json;

namespace {
const json kTokens = {{"admin_token", "admin-token-0123456789"},
                      {"enrollment_token", "enroll-token-0123456789"}};
}

TEST_CASE("coordinator config fills defaults and names the bad key") {
  CoordinatorConfig c = parse_coordinator_config(kTokens);
  CHECK(c.listen_address == "127.0.0.1");
  CHECK(c.max_upload_bytes == 64u << 20);
  CHECK(c.max_model_bytes == 64u << 20);
  json bad = kTokens;
  bad["max_model_bytes"] = 100;
  CHECK_THROWS_WITH_AS(parse_coordinator_config(bad), doctest::Contains("max_model_bytes"),
                       std::runtime_error);
  bad = kTokens;
  bad["port"] = 70000;
  CHECK_THROWS_WITH_AS(parse_coordinator_config(bad), doctest::Contains("port"),
                       std::runtime_error);
  bad = kTokens;
  bad["read_timeout_s"] = "soon";
  CHECK_THROWS_WITH_AS(parse_coordinator_config(bad), doctest::Contains("read_timeout_s"),
                       std::runtime_error);
  bad = kTokens;
  bad["max_conections"] = 5;  // a typo is refused, not ignored
  CHECK_THROWS_WITH_AS(parse_coordinator_config(bad), doctest::Contains("max_conections"),
                       std::runtime_error);
  bad = kTokens;
  bad["io_threads"] = 0;
  CHECK_THROWS_WITH_AS(parse_coordinator_config(bad), doctest::Contains("io_threads"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(parse_coordinator_config(json::object()),
                       doctest::Contains("at least 16 characters"), std::runtime_error);
  json same = {{"admin_token", "same-token-0123456789"},
               {"enrollment_token", "same-token-0123456789"}};
  CHECK_THROWS_AS(parse_coordinator_config(same), std::runtime_error);
  CHECK_THROWS_WITH_AS(load_coordinator_config("/nonexistent.json"),
                       doctest::Contains("cannot read"), std::runtime_error);
}

TEST_CASE("a chunk is at most a plain upload: by default 8 MiB, or max_upload_bytes below that") {
  CHECK(parse_coordinator_config(kTokens).upload_chunk_bytes == 8u << 20);
  json small = kTokens;
  small["max_upload_bytes"] = 2 << 20;  // a coordinator with this alone refused to start
  CHECK(parse_coordinator_config(small).upload_chunk_bytes == 2u << 20);
  small["upload_chunk_bytes"] = 1 << 20;
  CHECK(parse_coordinator_config(small).upload_chunk_bytes == 1u << 20);
  json tiny = kTokens;
  tiny["max_upload_bytes"] = 2048;  // not even a chunk's least: the key at fault is named
  CHECK_THROWS_WITH_AS(parse_coordinator_config(tiny), doctest::Contains("max_upload_bytes"),
                       std::runtime_error);
  small["upload_chunk_bytes"] = 4 << 20;  // given, it must fit
  CHECK_THROWS_WITH_AS(parse_coordinator_config(small), doctest::Contains("upload_chunk_bytes"),
                       std::runtime_error);
}

TEST_CASE("a chunk is whole pieces: by default of 1 MiB, or the chunk when that is smaller") {
  CHECK(parse_coordinator_config(kTokens).upload_piece_bytes == 1u << 20);
  json odd = kTokens;
  odd["max_upload_bytes"] = 5000000;  // the default chunk: the whole pieces that fit
  CHECK(parse_coordinator_config(odd).upload_chunk_bytes == 4u << 20);
  json small = kTokens;
  small["upload_chunk_bytes"] = 64 << 10;  // a chunk below a piece is one piece
  CHECK(parse_coordinator_config(small).upload_piece_bytes == 64u << 10);
  json given = kTokens;
  given["upload_chunk_bytes"] = 3 << 20;
  given["upload_piece_bytes"] = 2 << 20;
  CHECK_THROWS_WITH_AS(parse_coordinator_config(given), doctest::Contains("whole number"),
                       std::runtime_error);
  given["upload_piece_bytes"] = 4 << 20;  // larger than the chunk
  CHECK_THROWS_WITH_AS(parse_coordinator_config(given), doctest::Contains("upload_piece_bytes"),
                       std::runtime_error);
  given["upload_piece_bytes"] = 1 << 20;
  CHECK(parse_coordinator_config(given).upload_chunk_bytes == 3u << 20);
}

TEST_CASE("environment tokens override the config file") {
  setenv("FEDCASE_ADMIN_TOKEN", "from-environment-0123456789", 1);
  CoordinatorConfig c = parse_coordinator_config(kTokens);
  unsetenv("FEDCASE_ADMIN_TOKEN");
  CHECK(c.admin_token == "from-environment-0123456789");
  CHECK(c.enrollment_token == "enroll-token-0123456789");
}

TEST_CASE("the database is a store URL; a plain path is an SQLite file") {
  CHECK(parse_coordinator_config(kTokens).database == "sqlite:var/fedcase.db");
  json j = kTokens;
  j["database"] = "/var/lib/fedcase/fedcase.db";  // as configs written before URLs have it
  CHECK(parse_coordinator_config(j).database == "/var/lib/fedcase/fedcase.db");
  j["database"] = "sqlite:/var/lib/fedcase/fedcase.db";
  CHECK(parse_coordinator_config(j).database == "sqlite:/var/lib/fedcase/fedcase.db");
  j["database"] = "mysql://db.internal/fedcase";
  CHECK_THROWS_WITH_AS(parse_coordinator_config(j), doctest::Contains("database: unknown"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(parse_coordinator_config(j), doctest::Contains("known: sqlite"),
                       std::runtime_error);
  j["database"] = "";
  CHECK_THROWS_WITH_AS(parse_coordinator_config(j), doctest::Contains("database"),
                       std::runtime_error);
}

TEST_CASE("a replica id is a short name, or empty for one chosen at start") {
  CHECK(parse_coordinator_config(kTokens).replica_id.empty());
  json j = kTokens;
  j["replica_id"] = "replica-2.east_a";
  CHECK(parse_coordinator_config(j).replica_id == "replica-2.east_a");
  for (const char* bad : {"has space", "semi;colon", "slash/"}) {
    j["replica_id"] = bad;
    CHECK_THROWS_WITH_AS(parse_coordinator_config(j), doctest::Contains("replica_id"),
                         std::runtime_error);
  }
  j["replica_id"] = std::string(65, 'r');
  CHECK_THROWS_WITH_AS(parse_coordinator_config(j), doctest::Contains("replica_id"),
                       std::runtime_error);
}

TEST_CASE("lease_s is 0 for a single coordinator, or a replica's lease of at least a second") {
  CHECK(parse_coordinator_config(kTokens).lease_s == 0);
  json j = kTokens;
  j["lease_s"] = 5;
  CHECK(parse_coordinator_config(j).lease_s == 5);
  for (double bad : {0.5, -1.0, 1000.0}) {
    j["lease_s"] = bad;
    CHECK_THROWS_WITH_AS(parse_coordinator_config(j), doctest::Contains("lease_s"),
                         std::runtime_error);
  }
}

TEST_CASE("pace steering is configured in its own block, every field checked") {
  CoordinatorConfig c = parse_coordinator_config(kTokens);
  CHECK(c.pace.pool_factor == 4);
  CHECK(c.pace.max_period_s == 60);
  CHECK(c.pace.reconnect_window_s == 30);
  json given = kTokens;
  given["pace"] = {{"max_period_s", 600}, {"reconnect_window_s", 120}};
  c = parse_coordinator_config(given);
  CHECK(c.pace.max_period_s == 600);
  CHECK(c.pace.reconnect_window_s == 120);
  CHECK(c.pace.jitter == 0.5);  // the rest stay the defaults
  for (const json& bad :
       {json{{"pool_factor", 0.5}}, json{{"min_period_s", 100}}, json{{"jitter", 1.5}},
        json{{"reconnect_window_s", -1}}, json{{"max_period", 10}}, json("fast")}) {
    json config = kTokens;
    config["pace"] = bad;
    CHECK_THROWS_WITH_AS(parse_coordinator_config(config), doctest::Contains("pace"),
                         std::runtime_error);
  }
}
