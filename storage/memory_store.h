#pragma once
// A Store that keeps everything in this process's memory: the seam for fast unit tests of the
// code above a store (no file, no server, microseconds a call). It meets the whole Store
// contract (tests/storage/store_contract.h) but durability: nothing outlives the process.
//
// Sharing: a store opened with an empty name has a database of its own, which no other store
// sees and which goes with it. Stores opened with the same non-empty name share one database
// (a coordinator and its readers, several replicas in one test), which lives while at least
// one of them is open: when the last one closes, the database is dropped, and the next store
// opened with that name starts empty. open_store reaches it as "memory:" (its own) and
// "memory:NAME" (shared).
//
// Thread-safe: one mutex per database, held by each call, which is therefore one transaction.
// Lease expiries run on the process's monotonic clock; LeaseRecord::expires_at reads it as
// unix seconds. Listeners hear the wake-ups of every store on the same database. Errors as
// the Store contract says; never kUnavailable or kInternal.

#include <memory>
#include <string>

#include "storage/store.h"

namespace fedcase::storage {

Result<std::unique_ptr<Store>> open_memory_store(const std::string& name = "");

}  // namespace fedcase::storage
