#pragma once
// The catalogue of the wire messages: their names and the fields each one's reader reads, so
// that the documentation (docs/protocol.md, one field table per message) can be checked against
// the code, and tools can walk every message.
//
// Pure functions; thread-safe.

#include <string>
#include <vector>

namespace fedcase::protocol {

enum class Message {
  kRegistration,        // registration.h: POST /v1/clients/register
  kDeviceInfo,          // registration.h: the registration's `device`
  kRegistrationReply,   // registration.h: its answer
  kTaskOffer,           // task_offer.h: GET /v1/task
  kTrainingSettings,    // task_offer.h: the task's `train`
  kEvaluationSettings,  // task_offer.h: the task's `evaluate`
  kCacheDirectives,     // task_offer.h: the task's `cache`
  kSecAggTask,          // task_offer.h: the task's `secure_aggregation`
  kCompression,         // task_offer.h: the task's `compression`
  kTaskStatus,          // task_status.h: GET .../rounds/{round}/status
  kUpdateMeta,          // update_meta.h: the X-Fedcase-Meta header of an upload
  kUploadOpen,          // upload_session.h: POST .../rounds/{round}/uploads
  kUploadState,         // upload_session.h: an upload session's answers
  kEvalReport,          // eval_report.h: the metadata's `evaluation`
  kErrorReply,          // error_reply.h: the `error` of every error answer
  // secagg.h: secure aggregation's stages
  kSecAggParams,           // the key list's `params`
  kSecAggAdvertiseKeys,    // stage 1, client to coordinator
  kSecAggPeerKeys,         // an element of the key list's `neighbours`
  kSecAggGraph,            // stage 1, coordinator to every client
  kSecAggKeyList,          // stage 1, coordinator to client
  kSecAggKeys,             // stage 1: the graph and the key list in one answer
  kSecAggCiphertext,       // an element of the shares' and forwarded shares' `shares`
  kSecAggShares,           // stage 2, client to coordinator
  kSecAggForwardedShares,  // stage 2, coordinator to client
  kSecAggMaskedInput,      // stage 3: the header of the masked vector
  kSecAggUnmaskRequest,    // stage 4, coordinator to client
  kSecAggShare,            // an element of the unmask response's share lists
  kSecAggUnmaskResponse,   // stage 4, client to coordinator
};

// Every message, in the order above.
const std::vector<Message>& all_messages();

// The message's name in docs/protocol.md ("task_offer", "update_meta", ...).
const char* message_name(Message message);

// The member names the message's reader reads, sorted, each once: the reader run over a
// message with every optional member present. A nested message (the task's `train`) is one
// field here and lists its own.
std::vector<std::string> message_fields(Message message);

}  // namespace fedcase::protocol
