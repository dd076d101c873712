// The in-memory store (storage/memory_store.h): the Store contract (tests/storage/
// store_contract.h) but the cases of a schema, and its rule for sharing a database.

#include "storage/memory_store.h"

#include <doctest/doctest.h>

#include <atomic>

#include "tests/storage/store_contract.h"

using namespace fedcase;
using namespace fedcase::storage;
using nlohmann::json;

namespace {

ClientRecord client(const std::string& token_hash) {
  return {0, token_hash, json::object(), json::object(), 1, 1};
}

// A database of a name of its own, kept alive between the stores of a case (as a file or a
// server keeps its data) by a store the backend holds open.
class MemoryBackend : public contract::Backend {
 public:
  MemoryBackend() : name_("contract-" + std::to_string(++made_)), keeper_(open_or_fail()) {}

  Result<std::unique_ptr<Store>> open() override { return open_store("memory:" + name_); }
  int current_schema_version() const override { return 0; }
  int schema_version() override { return 0; }
  void set_schema_version(int) override { FAIL("an in-memory database keeps no schema"); }
  void rewind_schema(int) override { FAIL("an in-memory database keeps no schema"); }

 private:
  std::unique_ptr<Store> open_or_fail() {
    auto store = open();
    REQUIRE_MESSAGE(store.ok(), store.status().to_string());
    return std::move(store).value();
  }

  static inline std::atomic<int> made_{0};
  const std::string name_;
  const std::unique_ptr<Store> keeper_;
};

}  // namespace

TEST_CASE("the in-memory store meets the Store contract") {
  contract::check_store_contract([] { return std::make_unique<MemoryBackend>(); });
}

TEST_CASE("stores opened with one name share a database until the last of them closes") {
  auto first = open_memory_store("shared-by-name");
  REQUIRE(first.ok());
  auto second = open_store("memory:shared-by-name");
  REQUIRE(second.ok());
  auto own = open_memory_store();
  REQUIRE(own.ok());
  const ClientId id = *(*first)->add_client(client("hash-a"));
  CHECK((*second)->get_client(id)->token_hash == "hash-a");
  CHECK((*own)->list_clients()->empty());
  CHECK((*open_memory_store("another-name"))->list_clients()->empty());

  first->reset();
  CHECK((*second)->list_clients()->size() == 1);  // one store on it is still open
  second->reset();
  auto again = open_memory_store("shared-by-name");
  REQUIRE(again.ok());
  CHECK((*again)->list_clients()->empty());  // the last one closed: it started anew
}
