#pragma once
// A client's side of one secure round (SecAgg+, docs/secure_aggregation.md) over the task's
// stage URLs (docs/protocol.md, "Secure aggregation"): what the session runs for a task whose
// job uses secure aggregation, so an app never programs for it. Keys are advertised and shared
// before training (share_keys); the trained delta is then masked and sent instead of the plain
// update (send_masked_input), and the unmask request answered (unmask). Each wait is a long
// poll on the stage's URL, bounded by the task's deadline (the unmask stage's by the deadline
// plus the task's stage_seconds) and by `stop`.
//
// Thread safety: not thread-safe; one session drives one SecureTask (per task).

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client_sdk/http_client.h"
#include "common/ids.h"
#include "common/status.h"
#include "protocol/task_offer.h"
#include "secagg/client.h"

namespace fedcase::client {

class SecureTask {
 public:
  // One request to the coordinator with the session's token (method, target, body, headers,
  // timeout in seconds).
  using Call =
      std::function<Result<HttpResponse>(const std::string&, const std::string&, const std::string&,
                                         std::map<std::string, std::string>, double)>;

  // `task` must carry secure_aggregation; `signing_key` is the client's registered Ed25519 key
  // (secagg::SecAggClient). `poll_wait_s` is each long poll's wait.
  SecureTask(const protocol::TaskOffer& task, ClientId self, const secagg::Bytes32& signing_key,
             Call call, double poll_wait_s, double request_timeout_s,
             const std::atomic<bool>& stop);

  // Advertises fresh keys, waits for the graph and the neighbours' keys, sends the encrypted
  // shares. kUnavailable when the coordinator refuses a message or the stage ends without
  // this client (it is then left out of the round); transport errors as they come.
  Status share_keys();
  // The masked vector to upload to the task's masked_input_url (the body), with its header
  // (X-Fedcase-SecAgg, JSON).
  struct MaskedInput {
    std::string body;
    std::string header;
  };
  // Waits for the shares forwarded to this client and masks `delta` (the trained model minus
  // the task's model) with `weight` (its samples), its values scaled by a ready cohort's
  // staleness factor (the task's; 1 in a synchronous round). kUnavailable when the share stage ended
  // without this client or too few neighbours shared (it is then left out of the round).
  Result<MaskedInput> mask(const std::vector<float>& delta, uint64_t weight);
  // Waits for the unmask request and answers it (never revealing both shares of a neighbour:
  // the library refuses such a request).
  Status unmask();

 private:
  // GETs `url` as a long poll until the coordinator answers other than 204, `until` (Unix
  // seconds) passes or `stop` is set; the answer's body, or why there is none.
  Result<std::string> wait_for(const std::string& url, double until);
  // POSTs a stage message (JSON).
  Status post(const std::string& url, const std::string& body);

  const protocol::TaskOffer task_;
  const protocol::SecAggTask urls_;
  Call call_;
  const double poll_wait_s_;
  const double request_timeout_s_;
  const std::atomic<bool>& stop_;
  secagg::SecAggClient client_;
};

}  // namespace fedcase::client
