#include "protocol/messages.h"

#include <algorithm>

#include "protocol/internal.h"

namespace fedcase::protocol {
namespace {

// A message with every optional member present, for its reader to read.
nlohmann::json complete(Message message) {
  EvalReport report{3, 120, 0.61, {{"accuracy", 0.79}}};
  DeviceInfo device{0.8, 2.5e8, 3136, {{"kind", "phone"}}};
  TaskOffer task;
  task.job = 1;
  task.round = 4;
  task.model = "torchscript";
  task.loss = "cross_entropy";
  task.model_version = 3;
  task.model_checksum = task.module_checksum = std::string(64, 'a');
  task.model_url = "/v1/jobs/1/models/3";
  task.module_url = "/v1/jobs/1/module";
  task.upload_url = "/v1/jobs/1/rounds/4/update";
  task.status_url = "/v1/jobs/1/rounds/4/status";
  task.evaluate = EvaluationSettings{};
  switch (message) {
    case Message::kRegistration:
      return write_registration(
          {kProtocolVersion, "fedcase-sdk/1", 600, 1 << 20, device, {{"region", "eu"}}});
    case Message::kDeviceInfo:
      return write_device_info(device);
    case Message::kRegistrationReply:
      return write_registration_reply({7, "token"});
    case Message::kTaskOffer:
      return write_task_offer(task);
    case Message::kTrainingSettings:
      return write_training_settings({});
    case Message::kEvaluationSettings:
      return write_evaluation_settings({});
    case Message::kCacheDirectives:
      return write_cache_directives({});
    case Message::kTaskStatus:
      return write_task_status({true, "open"});
    case Message::kUpdateMeta: {
      UpdateMeta meta;
      meta.samples = 600;
      meta.evaluation = report;
      return write_update_meta(meta);
    }
    case Message::kEvalReport:
      return write_eval_report(report);
    case Message::kErrorReply:
      return write_error_reply({"conflict", "round 3 of job 1 is not open for updates"});
  }
  return nlohmann::json::object();
}

template <class T>
internal::Keys keys_read(const nlohmann::json& value) {
  T out;
  internal::Keys keys;
  Status s = internal::read(value, "message", out, &keys);
  (void)s;  // the names are what is wanted; a complete message reads without error
  return keys;
}

}  // namespace

const std::vector<Message>& all_messages() {
  static const std::vector<Message> messages = {
      Message::kRegistration,    Message::kDeviceInfo,       Message::kRegistrationReply,
      Message::kTaskOffer,       Message::kTrainingSettings, Message::kEvaluationSettings,
      Message::kCacheDirectives, Message::kTaskStatus,       Message::kUpdateMeta,
      Message::kEvalReport,      Message::kErrorReply};
  return messages;
}

const char* message_name(Message message) {
  switch (message) {
    case Message::kRegistration:
      return "registration";
    case Message::kDeviceInfo:
      return "device";
    case Message::kRegistrationReply:
      return "registration_reply";
    case Message::kTaskOffer:
      return "task_offer";
    case Message::kTrainingSettings:
      return "train";
    case Message::kEvaluationSettings:
      return "evaluate";
    case Message::kCacheDirectives:
      return "cache";
    case Message::kTaskStatus:
      return "task_status";
    case Message::kUpdateMeta:
      return "update_meta";
    case Message::kEvalReport:
      return "evaluation";
    case Message::kErrorReply:
      return "error";
  }
  return "";
}

std::vector<std::string> message_fields(Message message) {
  const nlohmann::json value = complete(message);
  internal::Keys keys;
  switch (message) {
    case Message::kRegistration:
      keys = keys_read<Registration>(value);
      break;
    case Message::kDeviceInfo:
      keys = keys_read<DeviceInfo>(value);
      break;
    case Message::kRegistrationReply:
      keys = keys_read<RegistrationReply>(value);
      break;
    case Message::kTaskOffer:
      keys = keys_read<TaskOffer>(value);
      break;
    case Message::kTrainingSettings:
      keys = keys_read<TrainingSettings>(value);
      break;
    case Message::kEvaluationSettings:
      keys = keys_read<EvaluationSettings>(value);
      break;
    case Message::kCacheDirectives:
      keys = keys_read<CacheDirectives>(value);
      break;
    case Message::kTaskStatus:
      keys = keys_read<TaskStatus>(value);
      break;
    case Message::kUpdateMeta:
      keys = keys_read<UpdateMeta>(value);
      break;
    case Message::kEvalReport:
      keys = keys_read<EvalReport>(value);
      break;
    case Message::kErrorReply:
      keys = keys_read<ErrorReply>(value);
      break;
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

}  // namespace fedcase::protocol
