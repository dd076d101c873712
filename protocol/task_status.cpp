#include "protocol/task_status.h"

#include "protocol/internal.h"

namespace fedcase::protocol {
namespace internal {

Status read(const nlohmann::json& value, const std::string& where, TaskStatus& out, Keys* keys) {
  ObjectReader r(value, where);
  r.require("needed").boolean("needed", out.needed).require("reason").text("reason", out.reason);
  return finish(r, keys);
}

}  // namespace internal

Result<TaskStatus> read_task_status(const nlohmann::json& status) {
  return internal::read_message<TaskStatus>(status, "task_status");
}

nlohmann::json write_task_status(const TaskStatus& s) {
  return {{"needed", s.needed}, {"reason", s.reason}};
}

}  // namespace fedcase::protocol
