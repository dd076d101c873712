#pragma once
// Restart recovery: the coordinator's memory rebuilt from its store, so that a crash at any
// point loses no committed round. Runs once, at start, before any request or driver tick.

#include "server/core/rounds/parts.h"

namespace fedcase::server {

// Loads every client and tenant; marks each round that a crash left open as failed
// ("coordinator restarted while the round was open"); installs every job at its latest
// committed model with the policy and optimizer state saved with it; and queues the server
// evaluation of committed models that have none. A replica (config.lease_s > 0) installs
// every job unowned and leaves its rounds as they are: their owner, or the replica that
// acquires the job next, concludes them (replica/ownership.h). kInternal / kInvalidArgument
// when a stored record cannot be used (nothing is started then).
[[nodiscard]] Status recover(const CoordinatorParts& parts);

}  // namespace fedcase::server
