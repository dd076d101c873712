#pragma once
// The virtual-time fleet simulator. It drives the job through the coordinator's own round
// engine (rounds/: selection, planning, admission, aggregation, conclusion), and each
// participant's real client-side sampler and cache; participants really train the model
// (ml::Model) on their samples. The simulator keeps only the fleet and the virtual clock.
// Only time is simulated:
// a task's duration is modelled from the client's device (DeviceRow), not measured:
//
//   download + samples x compute_ms_per_sample + cache misses x sample_bytes / storage
//   speed + upload,  times a per-task log-normal jitter.
//
// A round opens at the current virtual time, invites whom the policy selects, and closes at
// the K-th arrival (the round admits the first K uploads, as on the coordinator) or at the
// deadline. A client that is offline when the round opens or goes offline before finishing
// never reports; one that finishes after the deadline is refused. Virtual time then moves to
// the round's close.
//
// An asynchronous job (mode "async") runs buffers instead, event by event as the coordinator
// does: free slots are refilled at once with clients the policy selects among those online
// and idle, each task's update arrives at its modelled finish (if its client stays online;
// otherwise its task expires at its deadline), trains from the version its task was handed
// out on, and joins the open buffer with its staleness weight; the K-th update concludes the
// buffer, and the next opens at once with the tasks still in flight. run_round runs to the
// next buffer's conclusion.
//
// Not thread-safe; separate Simulators may run on separate threads (call
// ml::set_torch_threads on each).

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/status.h"
#include "ml/dataset.h"
#include "scheduling/profile.h"
#include "sim/config.h"
#include "sim/fleet.h"

namespace fedcase::sim {

// One invited client's task.
struct TaskTrace {
  ClientId client = 0;
  double start_s = 0;     // virtual time it was handed out (a round's open, or a slot's refill)
  bool online_at_open = false;
  bool finished = false;  // would have uploaded before going offline and before the deadline
  bool kept = false;      // among the first K finishers: its update was aggregated
  double duration_s = 0;  // modelled task duration (online_at_open only)
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t bytes = 0;  // the model it downloads and the update it uploads (online_at_open only)
};

struct RoundRecord {
  RoundIndex round = 0;
  double open_s = 0;       // virtual time the round opened
  double close_s = 0;      // virtual time it closed
  double deadline_s = 0;   // seconds after open
  bool committed = false;  // at least min_updates kept: the model moved
  double accuracy = 0;     // test accuracy of the model after the round
  double loss = 0;         // its test loss
  double train_loss = 0;   // mean training loss of the kept updates (NaN if none)
  size_t available = 0;
  size_t invited = 0;
  size_t participants = 0;  // kept
  size_t dropped = 0;       // invited without a report: offline, or missed the deadline
  double hit_ratio = 0;     // mean cache hit ratio of the kept participants
  // Work the fleet spent on the tasks that ended in this round (reported, refused or lost):
  // each from its start until it reported or its client went offline.
  double client_s = 0;
  size_t wasted = 0;          // updates that were trained and sent but not kept
  uint64_t bytes = 0;         // moved by the tasks that finished: their models and updates
  double mean_staleness = 0;  // of the kept updates (asynchronous jobs)
  std::vector<TaskTrace> tasks;  // the tasks it handed out
};

// An admitted update as it is folded in. For tests that replay a simulated round elsewhere.
struct UpdateEvent {
  ClientId client = 0;
  const std::vector<float>& delta;  // local - the version it trained from
  const scheduling::RoundReport& report;
  double at_s = 0;            // virtual time it arrived
  RoundIndex task_round = 0;  // the round its task was handed out in (its upload URL's)
  uint64_t trained_on = 0;    // the model version it trained from
};
using UpdateObserver = std::function<void(const UpdateEvent& update)>;

class Simulator {
 public:
  // `train` and `test` must outlive the simulator; `fleet` holds indices into `train`.
  // Errors: kInvalidArgument for a bad model, optimizer or aggregation config or a fleet
  // sample outside `train`.
  static Result<std::unique_ptr<Simulator>> create(const SimConfig& config,
                                                   const ml::Dataset& train,
                                                   const ml::Dataset& test,
                                                   std::vector<SimClient> fleet);
  ~Simulator();

  // Runs one round (an asynchronous job: up to its next buffer's conclusion), first waiting
  // (idle_wait_s at a time) until min_clients are available. kResourceExhausted when
  // max_virtual_s passes while waiting; other errors come from the libraries (and leave the
  // simulator unusable).
  Result<RoundRecord> run_round();

  double now_s() const;
  RoundIndex rounds() const;
  const std::vector<SimClient>& fleet() const;
  // The selection policy's name ("random", "oort", "fedcase").
  std::string policy() const;
  // The checksum of the current global model's blob (as the coordinator would serve it).
  const std::string& model_checksum() const;
  // What the selection policy has learnt (its saved state).
  const nlohmann::json& policy_state() const;
  void set_update_observer(UpdateObserver observer);

 private:
  struct State;
  explicit Simulator(std::unique_ptr<State> state);
  Result<RoundRecord> run_buffer();
  std::unique_ptr<State> state_;
};

}  // namespace fedcase::sim
