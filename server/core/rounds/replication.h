#pragma once
// How a round reaches the other coordinator replicas that share its database, at the fixed
// points of its life cycle (rounds/lifecycle.h). The round driver calls this interface and
// nothing else about replicas; two implementations stand behind it:
//  - local_replication(): a single coordinator. Nothing is shared: the round's record is the
//    only store write beyond an update's metadata, every partial is "in" at once, no message
//    is relayed and no round is followed.
//  - SharedReplication (replica/shared_replication.h): replicas on one database. Admission is
//    decided by the store among the round's K places, the owner reads the others' progress
//    and partials from the store, stage messages pass through it, and a replica follows the
//    rounds of the jobs it does not own; all of it paced, and read again at once when the
//    store's LISTEN/NOTIFY says something changed (wake()).
//
// The fixed points:
//   open     the owner records its round with what the others need to serve it; a buffer's
//            tasks again whenever they change (replan)
//   admit    an update joins a round (withdraw: its fold failed); a task poll asks whether
//            the client delivered through another replica
//   close    the owner closes the round's admission
//   gather   the owner learns whether the others filled the round and wrote their partials,
//            and at the conclusion reads their partials and the updates they admitted; a
//            follower writes its partial
//   relay    secure stage messages: the owner publishes each stage's messages and takes the
//            clients' messages relayed to it; a follower relays its clients' messages and
//            reads the owner's
//   follow   a replica learns the newest round of a job it does not own
//
// Errors: the store's (kConflict for a stale lease epoch, a closed round, a full round or a
// duplicate; kUnavailable when the database cannot serve now). Thread safety: every method
// may be called from any thread.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/status.h"
#include "rounds/round.h"
#include "storage/store.h"

namespace fedcase::server {

class RoundReplication {
 public:
  virtual ~RoundReplication() = default;

  // Whether rounds are served by every replica (false: a single coordinator's).
  virtual bool shared() const = 0;
  // This coordinator's name among the replicas ("" for a single coordinator).
  virtual const std::string& replica() const = 0;
  // The store changed (a wake-up): the next observations read it whatever their pace.
  virtual void wake() = 0;

  // ---- open ----
  // Records the owner's newly opened `round` as `record` (its index, state, times, invitees
  // and epoch set by the caller), with its K and plan when the others serve it too.
  virtual Status open(storage::RoundRecord record, const rounds::Round& round) = 0;
  // A buffer's tasks changed (a refill): the replicas that serve it learn its new `plan`
  // (rounds::round_plan_json; made only when shared()).
  virtual Status replan(JobId job, RoundIndex round, const nlohmann::json& plan,
                        storage::Epoch epoch) = 0;

  // ---- admit ----
  // Admits `update` (its replica set here) to its round, once validated and before its fold:
  // a single coordinator records its metadata (its memory decided admission: Round::reserve);
  // replicas have the store decide among the round's K places. Whether it filled the round.
  virtual Result<bool> admit(storage::UpdateRecord update) = 0;
  // Takes back an update admit() admitted, whose fold failed.
  virtual Status withdraw(JobId job, RoundIndex round, ClientId client) = 0;
  // Whether `client` delivered its update to the round through another replica.
  virtual Result<bool> delivered_elsewhere(JobId job, RoundIndex round, ClientId client) = 0;

  // ---- close ----
  // Closes the round's admission everywhere (nothing to do for a single coordinator).
  virtual Status close(JobId job, RoundIndex round, storage::Epoch epoch) = 0;

  // ---- gather ----
  // The owner's view of its round `round` with the others' part in it: the updates admitted so
  // far by every replica (0 for a single coordinator, whose memory counts its own), and once
  // admission closed (at `closed_at`) whether every replica holding admitted updates wrote its
  // partial, or `lease_s` passed since (the others' updates without a partial are then lost).
  // Read at a pace, unless woken; the last reading in between.
  struct Contributions {
    uint64_t admitted = 0;
    bool partials_in = false;
    bool waited_out = false;
  };
  virtual Contributions contributions(JobId job, RoundIndex round, std::optional<double> closed_at,
                                      double now) = 0;
  // At the owner's conclusion: the others' partials, and the updates the store admitted.
  struct Gathered {
    std::vector<storage::PartialRecord> partials;
    std::vector<storage::UpdateRecord> updates;
  };
  virtual Result<Gathered> gather(JobId job, RoundIndex round) = 0;
  // A follower's partial of the owner's round (its replica set here).
  virtual Status put_partial(storage::PartialRecord partial) = 0;

  // ---- relay ----
  // The owner's messages of a stage (`kind`: stage_kind::kKeysReply, kForwarded,
  // kUnmaskRequest), by client, for the clients that reach other replicas.
  virtual Status publish_stage(JobId job, RoundIndex round, const char* kind,
                               const std::map<ClientId, std::string>& messages) = 0;
  // A follower passes a client's message of a stage (stage_kind::kKeys, kShares, kUnmask) on
  // to the owner; kConflict when that client's message of that kind was passed already.
  virtual Status relay(JobId job, RoundIndex round, const char* kind, ClientId client,
                       const std::string& body) = 0;
  // The clients' messages of `kind` relayed to the owner so far, by client.
  virtual Result<std::map<ClientId, std::string>> relayed(JobId job, RoundIndex round,
                                                          const char* kind) = 0;
  // The owner's messages of `kind` a follower serves (empty until the owner published them).
  virtual Result<std::map<ClientId, std::string>> published(JobId job, RoundIndex round,
                                                            const char* kind) = 0;

  // ---- follow ----
  // The newest round of a job this replica does not own, as the store holds it (nullopt: no
  // round yet), and wakes() when the store was read. Read at a pace, unless woken; the last
  // reading in between.
  struct Followed {
    std::optional<storage::RoundRecord> round;
    uint64_t wakes = 0;
  };
  virtual Result<Followed> followed(JobId job, double now) = 0;
  // How many wake-ups (wake()) came so far: a reading made at a lower count may miss what the
  // store holds since. Thread-safe.
  virtual uint64_t wakes() const = 0;

  // When the next paced reading (contributions(), followed()) of what was read so far falls
  // due after `now` (nullopt: none is paced), for the driver to wake then.
  virtual std::optional<double> next_reading(double now) const = 0;
};

// A single coordinator's replication over `store`, which must outlive it.
std::unique_ptr<RoundReplication> local_replication(storage::Store& store);

}  // namespace fedcase::server
