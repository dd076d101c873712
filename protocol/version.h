#pragma once
// The version of the wire protocol (docs/protocol.md, "Protocol versions"). Every task offer
// carries the version it is written in, and the SDK sends the version it speaks when it
// registers: the coordinator refuses an SDK it cannot serve, and the SDK refuses a task it
// cannot read, each with a message naming both versions.
//
// Pure functions; thread-safe.

#include <cstdint>

#include "common/status.h"

namespace fedcase::protocol {

// The version this build writes.
inline constexpr uint32_t kProtocolVersion = 1;
// The oldest version this build still reads (task offers) and serves (SDKs).
inline constexpr uint32_t kOldestProtocolVersion = 1;
// What an SDK that sends no protocol_version at registration speaks: the SDKs that predate
// the field read version 1 task offers.
inline constexpr uint32_t kUnversionedProtocol = 1;

// OK when a coordinator of this build serves an SDK speaking `sdk_version`; otherwise
// kUnprocessable naming both versions and which side to upgrade.
Status check_sdk_version(uint32_t sdk_version);

// OK when an SDK of this build reads a task offer of `task_version`; otherwise kUnprocessable
// naming both versions and which side to upgrade.
Status check_task_version(uint32_t task_version);

}  // namespace fedcase::protocol
