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
  task.compression = Compression{};
  task.local_buffers = {"bn.running_mean"};
  task.trainable = {"head.weight"};
  task.trainable_url = "/v1/jobs/1/models/3/trainable";
  task.uploads_url = "/v1/jobs/1/rounds/4/uploads";
  task.chunk_bytes = 8 << 20;
  const SecAggTask secure{"/v1/jobs/1/rounds/4/secagg/keys", "/v1/jobs/1/rounds/4/secagg/shares",
                          "/v1/jobs/1/rounds/4/secagg/masked_input",
                          "/v1/jobs/1/rounds/4/secagg/unmask", 10};
  task.secure_aggregation = secure;
  const std::string key(kSecAggKeyBytes, 'k');
  const SecAggParams secagg_params{4, 3, 32, 1.5, 1e5, 1000, 10};
  const SecAggPeerKeys peer{9, key, key};
  const SecAggCiphertext ciphertext{9, "sealed"};
  const SecAggShare share{9, "share"};
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
    case Message::kSecAggTask:
      return write_secagg_task(secure);
    case Message::kCompression:
      return {{"kind", "q8"}, {"block", 256}, {"fraction", 0.01}};
    case Message::kTaskStatus:
      return write_task_status({true, "open"});
    case Message::kUpdateMeta: {
      UpdateMeta meta;
      meta.samples = 600;
      meta.evaluation = report;
      return write_update_meta(meta);
    }
    case Message::kUploadOpen:
      return write_upload_open({1 << 20, std::string(64, 'a')});
    case Message::kUploadState:
      return write_upload_state({"/v1/jobs/1/rounds/4/uploads/ab12", 1 << 20, 1 << 18, 1 << 18});
    case Message::kEvalReport:
      return write_eval_report(report);
    case Message::kErrorReply:
      return write_error_reply({"conflict", "round 3 of job 1 is not open for updates"});
    case Message::kSecAggParams:
      return write_secagg_params(secagg_params);
    case Message::kSecAggAdvertiseKeys:
      return write_secagg_advertise_keys({1, 4, 7, key, key});
    case Message::kSecAggPeerKeys:
      return write_secagg_peer_keys(peer);
    case Message::kSecAggGraph:
      return write_secagg_graph({1, 4, secagg_params, key, {7, 9}});
    case Message::kSecAggKeyList:
      return write_secagg_key_list({1, 4, {peer}});
    case Message::kSecAggKeys:
      return write_secagg_keys({{1, 4, secagg_params, key, {7, 9}}, {1, 4, {peer}}});
    case Message::kSecAggCiphertext:
      return write_secagg_ciphertext(ciphertext);
    case Message::kSecAggShares:
      return write_secagg_shares({1, 4, 7, key, {ciphertext}});
    case Message::kSecAggForwardedShares:
      return write_secagg_forwarded_shares({1, 4, {ciphertext}});
    case Message::kSecAggMaskedInput:
      return write_secagg_masked_input({1, 4, 7, 11, 4, {9}});
    case Message::kSecAggUnmaskRequest:
      return write_secagg_unmask_request({1, 4, {9}, {12}});
    case Message::kSecAggShare:
      return write_secagg_share(share);
    case Message::kSecAggUnmaskResponse:
      return write_secagg_unmask_response({1, 4, 7, {share}, {share}});
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
  static const std::vector<Message> messages = {Message::kRegistration,
                                                Message::kDeviceInfo,
                                                Message::kRegistrationReply,
                                                Message::kTaskOffer,
                                                Message::kTrainingSettings,
                                                Message::kEvaluationSettings,
                                                Message::kCacheDirectives,
                                                Message::kSecAggTask,
                                                Message::kCompression,
                                                Message::kTaskStatus,
                                                Message::kUpdateMeta,
                                                Message::kUploadOpen,
                                                Message::kUploadState,
                                                Message::kEvalReport,
                                                Message::kErrorReply,
                                                Message::kSecAggParams,
                                                Message::kSecAggAdvertiseKeys,
                                                Message::kSecAggPeerKeys,
                                                Message::kSecAggGraph,
                                                Message::kSecAggKeyList,
                                                Message::kSecAggKeys,
                                                Message::kSecAggCiphertext,
                                                Message::kSecAggShares,
                                                Message::kSecAggForwardedShares,
                                                Message::kSecAggMaskedInput,
                                                Message::kSecAggUnmaskRequest,
                                                Message::kSecAggShare,
                                                Message::kSecAggUnmaskResponse};
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
    case Message::kSecAggTask:
      return "secagg_task";
    case Message::kCompression:
      return "compression";
    case Message::kTaskStatus:
      return "task_status";
    case Message::kUpdateMeta:
      return "update_meta";
    case Message::kUploadOpen:
      return "upload_open";
    case Message::kUploadState:
      return "upload_state";
    case Message::kEvalReport:
      return "evaluation";
    case Message::kErrorReply:
      return "error";
    case Message::kSecAggParams:
      return "secagg_params";
    case Message::kSecAggAdvertiseKeys:
      return "secagg_advertise_keys";
    case Message::kSecAggPeerKeys:
      return "secagg_peer_keys";
    case Message::kSecAggGraph:
      return "secagg_graph";
    case Message::kSecAggKeyList:
      return "secagg_key_list";
    case Message::kSecAggKeys:
      return "secagg_keys";
    case Message::kSecAggCiphertext:
      return "secagg_ciphertext";
    case Message::kSecAggShares:
      return "secagg_shares";
    case Message::kSecAggForwardedShares:
      return "secagg_forwarded_shares";
    case Message::kSecAggMaskedInput:
      return "secagg_masked_input";
    case Message::kSecAggUnmaskRequest:
      return "secagg_unmask_request";
    case Message::kSecAggShare:
      return "secagg_share";
    case Message::kSecAggUnmaskResponse:
      return "secagg_unmask_response";
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
    case Message::kSecAggTask:
      keys = keys_read<SecAggTask>(value);
      break;
    case Message::kCompression:
      keys = keys_read<Compression>(value);
      break;
    case Message::kTaskStatus:
      keys = keys_read<TaskStatus>(value);
      break;
    case Message::kUpdateMeta:
      keys = keys_read<UpdateMeta>(value);
      break;
    case Message::kUploadOpen:
      keys = keys_read<UploadOpen>(value);
      break;
    case Message::kUploadState:
      keys = keys_read<UploadState>(value);
      break;
    case Message::kEvalReport:
      keys = keys_read<EvalReport>(value);
      break;
    case Message::kErrorReply:
      keys = keys_read<ErrorReply>(value);
      break;
    case Message::kSecAggParams:
      keys = keys_read<SecAggParams>(value);
      break;
    case Message::kSecAggAdvertiseKeys:
      keys = keys_read<SecAggAdvertiseKeys>(value);
      break;
    case Message::kSecAggPeerKeys:
      keys = keys_read<SecAggPeerKeys>(value);
      break;
    case Message::kSecAggGraph:
      keys = keys_read<SecAggGraph>(value);
      break;
    case Message::kSecAggKeyList:
      keys = keys_read<SecAggKeyList>(value);
      break;
    case Message::kSecAggKeys:
      keys = keys_read<SecAggKeys>(value);
      break;
    case Message::kSecAggCiphertext:
      keys = keys_read<SecAggCiphertext>(value);
      break;
    case Message::kSecAggShares:
      keys = keys_read<SecAggShares>(value);
      break;
    case Message::kSecAggForwardedShares:
      keys = keys_read<SecAggForwardedShares>(value);
      break;
    case Message::kSecAggMaskedInput:
      keys = keys_read<SecAggMaskedInput>(value);
      break;
    case Message::kSecAggUnmaskRequest:
      keys = keys_read<SecAggUnmaskRequest>(value);
      break;
    case Message::kSecAggShare:
      keys = keys_read<SecAggShare>(value);
      break;
    case Message::kSecAggUnmaskResponse:
      keys = keys_read<SecAggUnmaskResponse>(value);
      break;
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

}  // namespace fedcase::protocol
