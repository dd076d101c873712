// The test support's FailingStore (tests/support/failing_store.h): armed methods fail without
// reaching the store, the rest pass through.

#include "tests/support/failing_store.h"

#include <doctest/doctest.h>

#include "tests/support/temp_dir.h"

using namespace fedcase;
using namespace fedcase::storage;
using fedcase::testing::StoreFaults;
using fedcase::testing::StoreMethod;
using nlohmann::json;

TEST_CASE("a failing store fails what is armed, as often as armed, and stores nothing of it") {
  fedcase::testing::TempDir dir;
  auto real = open_sqlite_store(dir.file("fedcase.db"));
  REQUIRE(real.ok());
  auto faults = std::make_shared<StoreFaults>();
  auto store = fedcase::testing::failing_store(std::move(real).value(), faults);
  const ClientRecord client{0, "hash", json::object(), json::object(), 1, 1};

  faults->fail(StoreMethod::kAddClient, internal_error("disk full"), 2);
  CHECK(store->add_client(client).status().message() == "disk full");
  CHECK(store->add_client(client).status().code() == Code::kInternal);
  auto added = store->add_client(client);  // the third call goes through
  REQUIRE(added.ok());
  CHECK(faults->calls(StoreMethod::kAddClient) == 3);
  CHECK(faults->failures(StoreMethod::kAddClient) == 2);
  CHECK(store->list_clients()->size() == 1);

  faults->fail(StoreMethod::kListClients, unavailable("busy"), StoreFaults::kEveryCall);
  for (int i = 0; i < 3; ++i) CHECK(store->list_clients().status().code() == Code::kUnavailable);
  CHECK(store->get_client(*added).ok());  // other methods are unaffected
  faults->clear(StoreMethod::kListClients);
  CHECK(store->list_clients().ok());

  faults->fail(StoreMethod::kCommitRound, internal_error("x"));
  faults->fail(StoreMethod::kGetJob, not_found("y"));
  faults->clear_all();
  CHECK(store->get_job(1).status().code() == Code::kNotFound);  // the real store's answer
  CHECK(faults->failures(StoreMethod::kGetJob) == 0);
  CHECK(std::string(fedcase::testing::method_name(StoreMethod::kCommitRound)) == "commit_round");
}
