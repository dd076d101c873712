#pragma once
// A Store that fails chosen methods on demand, for tests of what the code above a store does
// when a write (or a read) fails: it wraps a real store and passes every call through, except
// the calls of a method a test has armed, which return the armed Status without reaching the
// wrapped store (so nothing of such a call is stored), or, armed with Fault::kAfter, after the
// wrapped store carried the call out (a commit whose answer was lost). A method may also be
// slowed down: each of its calls waits before it reaches the wrapped store (a database that
// is slow to answer).
//
//   auto faults = std::make_shared<testing::StoreFaults>();
//   auto store = testing::failing_store(std::move(real), faults);  // hand `store` to the code
//   faults->fail(testing::StoreMethod::kCommitRound, internal_error("disk full"));

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>

#include "common/status.h"
#include "storage/store.h"

namespace fedcase::testing {

// Every method of storage::Store.
enum class StoreMethod {
  kAddClient,
  kGetClient,
  kFindClient,
  kListClients,
  kUpdateClients,
  kContactsAfter,
  kCreateJob,
  kGetJobModule,
  kGetJob,
  kListJobs,
  kSetJobState,
  kAddTenant,
  kListTenants,
  kOpenRound,
  kAdmitUpdate,
  kWithdrawUpdate,
  kHasUpdate,
  kCommitRound,
  kFailRound,
  kAddRoundMetrics,
  kListRounds,
  kListUpdates,
  kUpdateRoundPlan,
  kGetModel,
  kLatestModel,
  kCloseAdmission,
  kRoundAdmission,
  kPutPartial,
  kListPartials,
  kPutStageMessages,
  kListStageMessages,
  kPutUsedKeys,
  kListUsedKeys,
  kOpenUpload,
  kGetUpload,
  kPutUploadChunk,
  kGetUploadChunk,
  kDropUpload,
  kAcquireLease,
  kRenewLease,
  kReleaseLease,
  kListLeases,
  kChargeTenant,
  kListTenantService,
  kNotify,
  kListen,
  kPing,
};
inline constexpr size_t kStoreMethods = static_cast<size_t>(StoreMethod::kPing) + 1;

// The Store method's name ("commit_round"), for messages.
const char* method_name(StoreMethod method);

// Which calls fail, shared between a test and the FailingStores it made. Thread-safe: the code
// under test may call the store from any thread while the test arms and counts.
// When an armed call fails: before it reaches the wrapped store (nothing of it is done), or
// after the wrapped store carried it out (its outcome is lost on the way back).
enum class Fault { kBefore, kAfter };

class StoreFaults {
 public:
  static constexpr size_t kEveryCall = 0;

  // The next `times` calls of `method` (kEveryCall: every call until clear) return `status`,
  // which must not be OK, `when` says. Replaces what was armed for `method` before.
  void fail(StoreMethod method, Status status, size_t times = 1, Fault when = Fault::kBefore);
  // Every call of `method` waits `seconds` before it reaches the wrapped store, until clear.
  void delay(StoreMethod method, double seconds);
  // Calls of `method` (or of every method) go through again.
  void clear(StoreMethod method);
  void clear_all();

  // Calls of `method` so far, failed ones included; and those that failed.
  size_t calls(StoreMethod method) const;
  size_t failures(StoreMethod method) const;

  // What a call of `method` meets, counted: how long it waits, then the Status it fails with
  // (OK: it passes through) and when.
  struct Outcome {
    double delay_s = 0;
    Status status;
    Fault when = Fault::kBefore;
  };
  Outcome on_call(StoreMethod method);

 private:
  struct Armed {
    Status status;
    Fault when = Fault::kBefore;
    double delay_s = 0;
    size_t remaining = 0;  // calls still to fail; kEveryCall: all of them
    bool armed = false;
    size_t calls = 0;
    size_t failures = 0;
  };
  mutable std::mutex mu_;
  std::array<Armed, kStoreMethods> methods_;
};

// A store over `store` (owned) that fails the calls `faults` arms. Thread safety and errors
// otherwise those of `store`.
std::unique_ptr<storage::Store> failing_store(std::unique_ptr<storage::Store> store,
                                              std::shared_ptr<StoreFaults> faults);

}  // namespace fedcase::testing
