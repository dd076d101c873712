// Store URLs: which backend a URL names, and what open_store does with it.

#include <doctest/doctest.h>

#include "storage/store.h"
#include "tests/support/temp_dir.h"

using namespace fedcase;
using namespace fedcase::storage;
using nlohmann::json;

TEST_CASE("a store URL names its backend; a plain path is an SQLite file") {
  auto url = parse_store_url("sqlite:var/fedcase.db");
  REQUIRE(url.ok());
  CHECK(url->scheme == "sqlite");
  CHECK(url->location == "var/fedcase.db");
  url = parse_store_url("SQLite:/srv/f.db");
  REQUIRE(url.ok());
  CHECK(url->scheme == "sqlite");
  CHECK(url->location == "/srv/f.db");
  for (const char* plain : {"var/fedcase.db", "/var/lib/fedcase/fedcase.db", "fedcase.db",
                            "./a:b.db", "var/x:y/f.db", ":memory:"}) {
    CAPTURE(plain);
    url = parse_store_url(plain);
    REQUIRE(url.ok());
    CHECK(url->scheme == "sqlite");
    CHECK(url->location == plain);
  }
  CHECK(parse_store_url("sqlite:a:b.db")->location == "a:b.db");  // only the first ':' counts
}

TEST_CASE("a PostgreSQL URL is a libpq connection URI, passed whole") {
  auto url = parse_store_url("postgresql://fedcase@db.internal:5433/fedcase?sslmode=require");
  REQUIRE(url.ok());
  CHECK(url->scheme == "postgresql");
  CHECK(url->location == "postgresql://fedcase@db.internal:5433/fedcase?sslmode=require");
  url = parse_store_url("Postgres:///fedcase?host=/run/postgresql");  // a Unix socket directory
  REQUIRE(url.ok());
  CHECK(url->scheme == "postgresql");
  CHECK(url->location == "postgresql:///fedcase?host=/run/postgresql");
  for (const char* bad : {"postgresql:fedcase", "postgres:/db", "postgresql:"}) {
    CAPTURE(bad);
    CHECK(parse_store_url(bad).status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("an unknown scheme, an empty URL or an empty path is kInvalidArgument") {
  for (const char* bad : {"mysql://db.internal/fedcase", "mysql:fedcase", "a:b.db"}) {
    CAPTURE(bad);
    auto url = parse_store_url(bad);
    CHECK(url.status().code() == Code::kInvalidArgument);
    CHECK(url.status().message().find("unknown database scheme") != std::string::npos);
    CHECK(url.status().message().find(std::string("known: ") + known_store_schemes()) !=
          std::string::npos);
    CHECK(open_store(bad).status().code() == Code::kInvalidArgument);
  }
  CHECK(parse_store_url("").status().code() == Code::kInvalidArgument);
  CHECK(parse_store_url("sqlite:").status().code() == Code::kInvalidArgument);
  CHECK(open_store("sqlite:").status().code() == Code::kInvalidArgument);
}

TEST_CASE("a URL and the plain path open the same SQLite file") {
  testing::TempDir dir;
  const std::string path = dir.file("fedcase.db");
  {
    auto store = open_store("sqlite:" + path);
    REQUIRE(store.ok());
    REQUIRE((*store)->add_client({0, "hash", json::object(), json::object(), 1, 1}).ok());
  }
  auto plain = open_store(path);
  REQUIRE(plain.ok());
  CHECK((*plain)->list_clients()->size() == 1);
  auto missing = open_store("sqlite:/nonexistent-dir/x/fedcase.db");
  CHECK(missing.status().code() == Code::kInternal);
  CHECK(missing.status().detail().find("/nonexistent-dir/x/fedcase.db") != std::string::npos);
}

TEST_CASE("memory: names a database in this process's memory, its own or shared by name") {
  auto url = parse_store_url("memory:");
  REQUIRE(url.ok());
  CHECK(url->scheme == "memory");
  CHECK(url->location.empty());
  url = parse_store_url("Memory:cluster-1");
  REQUIRE(url.ok());
  CHECK(url->scheme == "memory");
  CHECK(url->location == "cluster-1");
  CHECK(std::string(known_store_schemes()).find("memory") != std::string::npos);
  auto store = open_store("memory:");
  REQUIRE(store.ok());
  REQUIRE((*store)->add_client({0, "hash", json::object(), json::object(), 1, 1}).ok());
  CHECK((*open_store("memory:"))->list_clients()->empty());  // a database of its own
}
