#pragma once
// The errors every backend gives, written once so that they say the same (store.h,
// "Messages"). The database's own failures: a public message that says only that the database
// failed or cannot serve, with what the database said (its text, SQLSTATE, the URL without its
// password) in the detail. And the refusals of the stored state (kConflict), from the facts a
// backend read: their messages name jobs, rounds, clients and epochs, their details the
// replicas and lease holders. And URLs as messages may show them, without their passwords.
// Internal to storage/.

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "storage/store.h"

namespace fedcase::storage {

inline constexpr const char* kUnavailableMessage = "the database is unavailable";
inline constexpr const char* kFailedMessage = "the database failed";

// kUnavailable: the database cannot be reached or cannot serve now.
Status db_unavailable(std::string detail);
// kInternal: the database failed (an I/O error, a corrupt row, a bug).
Status db_failed(std::string detail);
// kUnavailable for a write whose connection was lost (`lost` says how) while its commit was
// under way: whether it landed is unknown, and reading the store back tells.
Status commit_outcome_unknown(const Status& lost);
// `status` with `message` in place of its message if it is kConflict (a constraint the
// database enforced, its own text kept in the detail); any other Status as it is.
Status conflict_as(Status status, std::string message);

// Where `url` (a store's URL, or a PostgreSQL key=value connection string) holds a password,
// as (offset, length) of each value: a URI's user info ("postgresql://user:secret@host") and
// its "password=" parameter, or a connection string's password (quoted or not).
std::vector<std::pair<size_t, size_t>> password_spans(const std::string& url);
// `url` with its passwords as "***", for messages.
std::string redacted(std::string url);

// "round R of job J".
std::string round_name(JobId job, RoundIndex round);

// OK for an acquisition or renewal's arguments; kInvalidArgument for an empty holder or a
// duration that is not > 0.
Status check_lease_request(const std::string& holder, double duration_s);
// OK if `epoch` is the job's lease epoch `current` (held by `holder`); else kConflict.
Status check_epoch(JobId job, Epoch epoch, Epoch current, const std::string& holder);
// kConflict for a lease change refused: the lease as it stands.
Status lease_refused(const LeaseRecord& lease);

// Where a round stands for one client's update, as a backend read it.
struct AdmissionFacts {
  bool round_known = false;
  RoundState state = RoundState::kOpen;
  uint64_t target = 0;
  bool admitting = false;  // close_admission was not called
  uint64_t admitted = 0;
  bool has_update = false;  // the client has an update in the round
  bool client_known = false;
};
// OK if the round admits the update (Store::admit_update); otherwise kConflict for the first of:
// the round is unknown ("round R of job J not found"), the client has an update in it ("client N
// already has an update in round R of job J"), the round, of a target K > 0, is concluded
// ("... is concluded"), closed to admission ("... is closed to admission") or full ("... is full
// (K updates)"), the client is unknown ("client N not found").
Status check_admission(JobId job, RoundIndex round, ClientId client, const AdmissionFacts& facts);
// OK if the round is open and admits (Store::withdraw_update); kConflict otherwise.
Status check_admitting(JobId job, RoundIndex round, bool round_known, bool open, bool admitting);
// kConflict: `replica` has no update of the client in the round to withdraw.
Status nothing_to_withdraw(JobId job, RoundIndex round, ClientId client,
                           const std::string& replica);
// OK if every stage message names its kind; kInvalidArgument otherwise.
Status check_stage_kinds(const std::vector<StageMessage>& messages);
// OK if the round takes the partial (Store::put_partial) as far as these facts go: it is open,
// closed to admission, and the store admitted `admitted` updates for the partial's replica.
Status check_partial(const PartialRecord& partial, bool round_known, bool open, bool admitting,
                     uint64_t admitted);

// Upload sessions' refusals (Store::get_upload, put_upload_chunk, get_upload_chunk).
Status upload_not_found(JobId job, RoundIndex round, const std::string& id);  // kNotFound
Status next_chunk_expected(const std::string& id, uint64_t stored);           // kConflict
Status chunk_not_stored(const std::string& id, uint64_t index);               // kNotFound

}  // namespace fedcase::storage
