#pragma once
// What the coordinator knows of one client: measured speeds, cache behaviour, availability
// history, statistical utility and participation counters. A profile is a plain value the
// server keeps in its store as JSON (profile_to_json / profile_from_json); the observe_*
// functions below fold one observation in and are the only code that moves its estimates.
//
// Pure: no clock and no I/O. Times are positive seconds on the coordinator's clock (e.g. since
// the Unix epoch), passed in by the caller. Not thread-safe: callers serialise updates of one
// profile.

#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/ids.h"
#include "common/status.h"

namespace fedcase::scheduling {

// An exponentially weighted moving average (EWMA) with the number of observations behind it.
struct Smoothed {
  double mean = 0;
  uint32_t count = 0;  // observations folded in (saturates)

  bool known() const { return count > 0; }
  // The first observation is taken as is; each later one moves the mean by
  // alpha * (x - mean), so an observation's weight decays by (1 - alpha) per newer one.
  void fold(double x, double alpha);
};

struct ProfileParams {
  // EWMA weight of the newest observation. 0.3: the latest report counts for 30%, one from
  // five observations ago for about 7%, so a client that moves (Wi-Fi to cellular, charger
  // unplugged) is tracked within a few rounds while one noisy round moves little.
  double alpha = 0.3;
  // A silence longer than this (e.g. three missed heartbeats) ends an online spell.
  double offline_gap_s = 90;
};

struct Availability {
  double last_seen_s = 0;     // last contact; 0 = never seen
  double online_since_s = 0;  // first contact of the current online spell
  Smoothed session_s;         // length of finished online spells (first to last contact)
  Smoothed offline_s;         // length of the silences between spells
  // While the device sleeps as the coordinator told it (pace steering: scheduling/pace.h),
  // the end of the window it was given to check in again; 0 = awake. A sleeping device is
  // not available (it holds no connection a task could reach), and its sleep is not a
  // silence: a check-in within its window (or client_timeout after) continues its spell.
  double steered_back_by_s = 0;
};

struct ClientProfile {
  ClientId id = 0;
  // Reported at registration.
  uint64_t dataset_size = 0;          // local training samples
  uint64_t cache_capacity_bytes = 0;  // what the client can give its sample cache; 0 = unknown
  // Speeds and cache behaviour; each unknown until first observed.
  Smoothed compute_ms_per_sample;
  Smoothed download_bytes_per_s;
  Smoothed upload_bytes_per_s;
  Smoothed storage_read_bytes_per_s;
  Smoothed sample_bytes;     // mean size of one stored training sample
  Smoothed cache_hit_ratio;  // fraction of sample reads served by the cache
  Availability availability;
  // Statistical utility (Oort) of the latest completed task, and the round it came from.
  // Not smoothed: it describes the data against the current model, and goes stale as the
  // model moves (the selection policies add a staleness bonus instead).
  double utility = 0;
  RoundIndex utility_round = 0;  // 0 = never completed a task
  // Selection feedback: what the latest round the client was invited to told the selection
  // policy when it concluded (Oort's per-client record, FedScale's register_feedback). A
  // client whose update was kept (accepted) gets its own utility (feedback_utility ==
  // utility) and no duration bound. An invitee the round closed without (still training or
  // uploading at the close: past the deadline, not needed once K updates had arrived, or
  // gone) gets the mean utility of the round's kept updates, and the time its task had run
  // at the close as a lower bound on its duration. `utility` and `utility_round` are never
  // set by such feedback: they stay what the client itself last reported.
  RoundIndex feedback_round = 0;  // 0 = no feedback yet: the client is unexplored
  double feedback_utility = 0;
  double duration_floor_s = 0;  // its last task outlasted this; 0 = no bound (completed)
  // Participation.
  RoundIndex last_selected_round = 0;  // 0 = never selected
  uint64_t times_selected = 0;
  uint64_t completions = 0;
  uint64_t missed_deadlines = 0;  // invited but no accepted update by the round's deadline
};

// What a client reports when it registers (from its device probe). Zero = not measured.
struct DeviceReport {
  uint64_t dataset_size = 0;
  uint64_t cache_capacity_bytes = 0;
  double sample_bytes = 0;
  double compute_ms_per_sample = 0;
  double storage_read_bytes_per_s = 0;
};

// The statistics of one completed task: what the client reported with its update, plus the
// transfer times the coordinator measured (or the client reported).
struct RoundReport {
  RoundIndex round = 0;
  uint64_t samples = 0;       // samples trained on, repetitions included (> 0)
  double loss_sum = 0;        // sum of the per-sample training losses
  double loss_sq_sum = 0;     // sum of their squares
  double compute_s = 0;       // time in forward/backward passes
  double io_s = 0;            // time reading samples from storage
  uint64_t cache_hits = 0;    // sample reads served by the cache
  uint64_t cache_misses = 0;  // sample reads served by storage
  double sample_bytes = 0;    // mean bytes per stored sample; 0 = not reported
  uint64_t download_bytes = 0;
  double download_s = 0;
  uint64_t upload_bytes = 0;
  double upload_s = 0;
};

// Oort's statistical utility of a batch set B: |B| * sqrt(mean of the squared losses), with
// |B| the distinct samples trained on (`unique_samples`, see unique_samples()) and the mean
// over all `samples` losses (repetitions included). 0 when `samples` is 0.
double statistical_utility(uint64_t unique_samples, uint64_t samples, double loss_sq_sum);

// The distinct samples a task of `samples` can train on from a dataset of `dataset_size`:
// min(samples, dataset_size), or `samples` when the dataset size is unknown (0).
uint64_t unique_samples(uint64_t samples, uint64_t dataset_size);

// Feedback for an invitee whose update the round did not keep (see ClientProfile).
struct NotKeptReport {
  RoundIndex round = 0;
  double mean_utility = 0;  // mean statistical utility of the round's kept updates; 0 if none
  double ran_s = 0;         // how long its task had run, unfinished, when the round closed
};

// Registration facts and probe measurements. kInvalidArgument (profile unchanged) for a
// negative or non-finite measurement.
Status observe_registration(ClientProfile& profile, const DeviceReport& report,
                            const ProfileParams& params = {});

// Any contact from the client at `now_s` (heartbeat, task fetch, upload): it is awake. A
// silence longer than params.offline_gap_s since the last contact closes the previous online
// spell and records the gap, unless the client was told to sleep and is back within its
// window (plus offline_gap_s). Contacts older than the last one (or at a time <= 0) are
// ignored.
void observe_heartbeat(ClientProfile& profile, double now_s, const ProfileParams& params = {});

// The client, in contact at `now_s`, was told to sleep and check in again by `back_by_s`. Told
// to check in again at once (back_by_s <= now_s: the jobs want every device), it stays awake.
void observe_steered(ClientProfile& profile, double now_s, double back_by_s,
                     const ProfileParams& params = {});

// Whether the client is awake (not sleeping as told) and was heard from within
// params.offline_gap_s before `now_s`.
bool is_online(const ClientProfile& profile, double now_s, const ProfileParams& params = {});

// Probability that the client stays online for `duration_s` more seconds, modelling online
// spells as exponential with the smoothed mean spell length: exp(-duration / mean). 1 when no
// spell has ended yet (nothing suggests the client leaves).
double survival_probability(const ClientProfile& profile, double duration_s);

// The client was invited to `round`.
void observe_selected(ClientProfile& profile, RoundIndex round);

// Folds a completed task in: compute speed (compute_s / samples), transfer speeds, cache hit
// ratio (hits / (hits + misses)), storage speed (bytes missed / io_s; without cache counts every
// sample counts as read from storage), sample size, the utility (|B| = unique_samples(samples,
// dataset_size)), the completion count, and the selection feedback (its own utility, no
// duration bound).
// Quantities the report leaves at zero are not observed. kInvalidArgument (profile unchanged)
// for samples == 0 or a negative or non-finite value.
Status observe_completion(ClientProfile& profile, const RoundReport& report,
                          const ProfileParams& params = {});

void observe_missed_deadline(ClientProfile& profile);

// The round closed without keeping the client's update: it counts as explored with the
// round's mean utility, and its task as lasting at least `ran_s` (feedback_* and
// duration_floor_s; utility, utility_round and the counters are unchanged). kInvalidArgument
// (profile unchanged) for a negative or non-finite value.
Status observe_not_kept(ClientProfile& profile, const NotKeptReport& report);

// The stored form: a JSON object with every field above (see docs/scheduling.md).
nlohmann::json profile_to_json(const ClientProfile& profile);
// Parses the stored form. "id" is required; other absent members keep their defaults and
// unknown members are ignored (a newer coordinator may have added them). kInvalidArgument
// naming the member for a wrong type or an out-of-range value.
Result<ClientProfile> profile_from_json(const nlohmann::json& json);

}  // namespace fedcase::scheduling
