#pragma once
// A Store that records how long each write to another Store takes, in the metrics'
// fedcase_store_write_seconds histogram (labelled by operation); reads pass straight through.
// Thread safety and errors: those of the wrapped store.

#include <memory>

#include "server/core/base/metrics.h"
#include "storage/store.h"

namespace fedcase::server {

// Owns `store`; `metrics` must outlive the returned store.
std::unique_ptr<storage::Store> timed_store(std::unique_ptr<storage::Store> store,
                                            Metrics& metrics);

}  // namespace fedcase::server
