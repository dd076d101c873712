#include "protocol/version.h"

#include <string>

namespace fedcase::protocol {
namespace {

// "protocol version 1" or "protocol versions 1 to 3".
std::string readable_versions() {
  if (kOldestProtocolVersion == kProtocolVersion) {
    return "protocol version " + std::to_string(kProtocolVersion);
  }
  return "protocol versions " + std::to_string(kOldestProtocolVersion) + " to " +
         std::to_string(kProtocolVersion);
}

}  // namespace

Status check_sdk_version(uint32_t sdk_version) {
  if (sdk_version >= kOldestProtocolVersion && sdk_version <= kProtocolVersion) {
    return ok_status();
  }
  return unprocessable("the SDK speaks protocol version " + std::to_string(sdk_version) +
                       "; this coordinator serves " + readable_versions() + ": upgrade the " +
                       (sdk_version > kProtocolVersion ? "coordinator" : "SDK"));
}

Status check_task_version(uint32_t task_version) {
  if (task_version >= kOldestProtocolVersion && task_version <= kProtocolVersion) {
    return ok_status();
  }
  return unprocessable("the task is written in protocol version " + std::to_string(task_version) +
                       "; this SDK reads " + readable_versions() + ": upgrade the " +
                       (task_version > kProtocolVersion ? "SDK" : "coordinator"));
}

}  // namespace fedcase::protocol
