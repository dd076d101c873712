#pragma once
// Whether a round still wants a client's update (GET .../rounds/{round}/status,
// docs/protocol.md): the SDK asks before it uploads, so a straggler does not send work that is
// no longer needed.
//
// Pure functions over plain values; thread-safe. Untrusted input gives a Status, never an
// exception.

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace fedcase::protocol {

// Both members are required.
struct TaskStatus {
  bool needed = true;  // upload the update
  std::string reason;  // why, for logs: "open", "round filled", "deadline passed", ...

  bool operator==(const TaskStatus& o) const { return needed == o.needed && reason == o.reason; }
  bool operator!=(const TaskStatus& o) const { return !(*this == o); }
};

// kInvalidArgument naming the field for a missing or mistyped one. Unknown keys are ignored.
Result<TaskStatus> read_task_status(const nlohmann::json& status);
nlohmann::json write_task_status(const TaskStatus& status);

}  // namespace fedcase::protocol
