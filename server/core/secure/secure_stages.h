#pragma once
// A secure round's stages (SecAgg+, docs/secure_aggregation.md) as clients' requests reach
// them on one coordinator: the owner's SecureRound (secure_round.h), or on a replica that
// does not own the job its SecureRoundCopy (secure_copy.h), which relays the messages to the
// owner through the store.

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/ids.h"
#include "common/status.h"
#include "protocol/secagg.h"
#include "secagg/stages.h"

namespace fedcase::server {

// Errors as SecureRound's (secure_round.h).
class SecureStages {
 public:
  virtual ~SecureStages() = default;
  virtual RoundIndex index() const = 0;
  virtual Status receive_keys(ClientId client, const protocol::SecAggAdvertiseKeys& message) = 0;
  virtual Status receive_shares(ClientId client, const protocol::SecAggShares& message) = 0;
  virtual Status receive_masked_input(ClientId client, const protocol::SecAggMaskedInput& header,
                                      std::string_view body,
                                      const std::function<Status()>& record) = 0;
  virtual Status receive_unmask_response(ClientId client,
                                         const protocol::SecAggUnmaskResponse& message) = 0;
  virtual Result<std::optional<std::string>> keys_reply(ClientId client) const = 0;
  virtual Result<std::optional<std::string>> forwarded_shares(ClientId client) const = 0;
  virtual Result<std::optional<std::string>> unmask_request(ClientId client) const = 0;
};

// The kinds of stage messages replicas pass through the store (secagg/stages.h).
namespace stage_kind = secagg::stage_kind;

}  // namespace fedcase::server
