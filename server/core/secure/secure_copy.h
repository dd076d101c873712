#pragma once
// A replica's copy of a secure round whose owner is another replica (docs/scaling.md, "Secure
// rounds on every replica"). The clients whose requests reach this replica talk to it as to the
// owner's SecureRound (SecureStages): their keys, shares and unmask answers are relayed to the
// owner (Setup::relay, through the store) once this replica has checked what it can (the
// stage, the sender, the message's job and round); their masked inputs are folded here into
// this replica's MaskedPartial, which the round driver writes as its partial once the owner
// closes the round to admission; and the owner's messages to them (the graph and key list, the
// forwarded shares, the unmask request), which the driver's follower pass reads from the store
// and publishes here, are served to their long polls. The owner makes every check that needs
// the whole round when it takes a relayed message or merges the partial (an input it refuses
// there counts as not sent, alone: secagg/masked_inputs.h).
//
// The stage is what the owner's messages tell (secagg::stage_reached): keys until the key
// replies are published here, shares until the forwarded shares are, masked input until the
// unmask requests are, then unmask. Each message's identity is checked as the owner checks it
// (secagg::RoundIdentity), and masked inputs are taken by the input stage's own rules
// (secagg::MaskedInputs, made from the forwarded shares when they are published). A client's
// message of a stage this copy has not heard of yet (the client had the
// stage's message from another replica first) is answered kUnavailable, to retry shortly, and
// the copy asks to catch up (Setup::behind): the follower pass reads the store at once. No
// request waits here.
//
// Thread safety: every method may be called from any thread. Masked inputs are folded one at a
// time (inputs_mu_, taken before mu_); relay() and behind() run under no lock of this object.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "aggregation/worker_pool.h"
#include "common/mutex.h"
#include "secagg/masked_inputs.h"
#include "secagg/stages.h"
#include "server/core/base/task_notifier.h"
#include "server/core/secure/secure_stages.h"

namespace fedcase::server {

class SecureRoundCopy : public SecureStages {
 public:
  struct Setup {
    JobId job = 0;
    RoundIndex round = 0;
    std::vector<ClientId> invitees;
    uint64_t vector_length = 0;  // the model's parameters
    uint32_t bits = 32;          // of the round's arithmetic (secagg::round_params)
    uint32_t degree = 1;         // of its neighbour graph (secagg::round_params)
    size_t threads = 2;          // for folds
    // The registered signing keys of the clients given that this replica knows
    // (ClientRegistry::signing_keys), asked when the key lists arrive: they must carry them,
    // each neighbour's keys signed under its own.
    std::function<std::map<ClientId, std::string>(const std::vector<ClientId>&)> signing_keys;
    // Passes a client's checked message (its kind, stage_kind::kKeys, kShares or kUnmask) on
    // to the owner; kConflict when the client sent that message already.
    std::function<Status(const char* kind, ClientId client, const std::string& body)> relay;
    // Asks for the owner's messages to be read from the store now.
    std::function<void()> behind;
  };
  // `notifier` (which wakes the polls of clients whose message is published) must outlive the
  // copy.
  SecureRoundCopy(Setup setup, TaskNotifier& notifier);

  RoundIndex index() const override { return identity_.round; }
  // kConflict out of stage or once the copy ended, kUnavailable (retry shortly) for a stage
  // this copy has not heard of yet, kPermissionDenied for a sender that is not the message's
  // client, not invited or without the previous stage's message, or a message of another job
  // or round; relay's errors (kConflict: the client sent this stage's message already).
  Status receive_keys(ClientId client, const protocol::SecAggAdvertiseKeys& message) override;
  Status receive_shares(ClientId client, const protocol::SecAggShares& message) override;
  Status receive_unmask_response(ClientId client,
                                 const protocol::SecAggUnmaskResponse& message) override;
  // Checks the header and every rule that needs no other replica's inputs
  // (secagg::MaskedInputs::check). Then runs `record` (the round's admission) and, if it
  // succeeds, folds the vector into the partial (or holds it there).
  Status receive_masked_input(ClientId client, const protocol::SecAggMaskedInput& header,
                              std::string_view body,
                              const std::function<Status()>& record) override;
  // nullopt until the owner's messages of that stage are published here; kPermissionDenied for
  // a client that has none; kConflict once the copy ended.
  Result<std::optional<std::string>> keys_reply(ClientId client) const override;
  Result<std::optional<std::string>> forwarded_shares(ClientId client) const override;
  Result<std::optional<std::string>> unmask_request(ClientId client) const override;

  // ---- the round driver ----
  // Whether the owner's messages of `kind` (stage_kind::kKeysReply, kForwarded,
  // kUnmaskRequest) are published here.
  bool published(const std::string& kind) const;
  // Publishes the owner's messages of `kind` (by client) and wakes the clients' polls; the
  // forwarded shares open the input stage here (a message that does not read ends the copy,
  // kInvalidArgument). Key lists (stage_kind::kKeysReply) are checked first: a neighbour's signing key that is not the
  // one it registered, or keys that do not carry its signature under it (keys substituted in
  // the store), end the copy (kPermissionDenied, nothing published): no client of this replica
  // encrypts a share to a key its owner did not sign. kUnavailable, nothing published, while
  // this replica has not read a neighbour's registration yet (it learns new clients within
  // about a second): publish again later.
  Status publish(const std::string& kind, std::map<ClientId, std::string> messages);
  // The masked inputs taken here, and their partial (secagg::MaskedInputs::encode) once none is
  // in flight ("" before the input stage opened).
  size_t inputs() const;
  std::string partial() const;
  // The round is over (`why`): polls and messages get kConflict from now on.
  void end(const std::string& why);

 private:
  // Whether `client`'s message (naming `named`, of `job` and `round`) is one of `stage`:
  // kConflict once the copy ended or is past it, kUnavailable while the copy has not reached it
  // (behind() is called), kPermissionDenied for a message of another client, job or round, of
  // a client that is not invited or that holds no message opening the stage.
  Status check_stage(secagg::Stage stage, ClientId client, ClientId named, JobId job,
                     RoundIndex round);
  // Checks a client's message of `stage` and relays it.
  Status receive(secagg::Stage stage, ClientId client, ClientId named, JobId job,
                 RoundIndex round, const std::string& body);
  // Whether each key list's neighbours carry their registered signing keys and signatures.
  Status check_key_lists(const std::map<ClientId, std::string>& messages) const;
  // Opens the input stage here from the forwarded shares (who may send, which shares each may
  // refuse).
  Status open_inputs(const std::map<ClientId, std::string>& forwarded);
  Result<std::optional<std::string>> published_message(const char* kind, ClientId client,
                                                       const char* missing) const;

  const secagg::RoundIdentity identity_;
  const std::vector<ClientId> invitee_list_;  // to wake
  const uint64_t words_;
  const uint32_t word_bytes_;
  const size_t max_held_;
  const decltype(Setup::signing_keys) signing_keys_;
  const decltype(Setup::relay) relay_;
  const decltype(Setup::behind) behind_;
  TaskNotifier& notifier_;
  const std::unique_ptr<aggregation::WorkerPool> pool_;  // for folds, under inputs_mu_

  mutable Mutex inputs_mu_;  // one masked input at a time: check, record, fold
  // The input stage's inputs, once the forwarded shares are published.
  std::optional<secagg::MaskedInputs> inputs_ FEDCASE_GUARDED_BY(inputs_mu_);
  mutable Mutex mu_ FEDCASE_ACQUIRED_AFTER(inputs_mu_);
  std::string ended_ FEDCASE_GUARDED_BY(mu_);
  // The owner's messages, by kind and client.
  std::map<std::string, std::map<ClientId, std::string>> published_ FEDCASE_GUARDED_BY(mu_);
};

}  // namespace fedcase::server
