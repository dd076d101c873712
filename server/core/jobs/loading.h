#pragma once
// A job loaded from the store as it holds it now: at the start (recovery), when another
// replica created or changed it, and when this replica acquires it (replica/ownership.h).

#include <memory>
#include <string>
#include <vector>

#include "server/core/jobs/job.h"
#include "storage/store.h"

namespace fedcase::server {

// `record`'s job as `store` holds it now, owned at `epoch`: its latest committed model with
// the optimizer and policy state saved with it, its module, and `rounds`, its rounds (filled
// in), of which those left open are first marked failed at `epoch`, closed at `now`, for
// `why` when `fail_open`. `coordinator` as make_job's. kInternal / kInvalidArgument when a
// stored record cannot be used, and the store's errors (kConflict: `epoch` is stale).
Result<InstalledJob> load_job(storage::Store& store, const storage::JobRecord& record,
                              const CoordinatorConfig& coordinator, bool fail_open,
                              storage::Epoch epoch,
                              const std::string& why, double now,
                              std::vector<storage::RoundRecord>& rounds);

// A stored model decoded for serving and training from; kInternal for a corrupt blob.
Result<std::shared_ptr<const rounds::GlobalModel>> stored_model(const storage::ModelRecord& record);

}  // namespace fedcase::server
