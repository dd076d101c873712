#pragma once
// Which jobs this coordinator drives when several replicas share one database
// (config.lease_s > 0; docs/scaling.md, "Ownership"). The store is the only arbiter: a replica
// drives a job's rounds (selection, opening, concluding, committing) only while it holds the
// job's lease, and every write it makes for the job carries the lease's epoch, which the store
// refuses once another replica acquired the job (storage/store.h, "Leases and fencing"). A
// replica that finds a write refused steps down (RoundDriver), so an owner that was paused or
// cut off past its lease commits nothing and stops driving the job.
//
// Each pass, on the round driver's thread, every lease_s / 4:
//  - renews the leases this replica holds; a renewal the store refuses (another replica
//    acquired the job) makes it step down, and one that cannot reach the store makes it step
//    down once the lease it last renewed has run out on its own clock;
//  - installs the jobs created through other replicas; takes the state an operator set through
//    another replica of a job it does not own; and loads again such a job once the store holds
//    a newer committed model (JobTable::refresh: never touching the round in progress here,
//    a copy of the owner's round included), so that every replica lists and serves every job;
//  - takes over one job that nobody holds (never acquired, released, or its owner's lease
//    expired) if it holds no more jobs than the replica holding the fewest, so that jobs
//    spread over the replicas: it acquires the lease (a new epoch), fails the round the
//    previous owner left open ("the job's owner changed while the round was open"), and
//    resumes the job from its latest committed model (a copy of that round served here goes
//    with it: rounds/lifecycle.h);
//  - reads the clients that changed (ClientRegistry::refresh): registrations and contacts
//    saved through other replicas, every kClientsEvery (5 s), and after a registration's
//    wake-up (clients_changed) at once, but at most every kClientsAtMostEvery (0.5 s), so a
//    registration storm costs one reading per half second, not one per registration. Before
//    it reads, it saves this replica's own unsaved contacts in one transaction: a contact
//    made here is known to every replica within about 2 x kClientsEvery, a registration
//    within kClientsAtMostEvery plus a pass.
//
// Thread safety: pass() and release_all() run on the round driver's thread (or, for
// release_all, once the driver stopped); nothing else is shared.

#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <string>

#include "server/core/rounds/parts.h"

namespace fedcase::server {

class Ownership {
 public:
  // Every part must outlive the object. `replica` names this replica in leases.
  Ownership(const CoordinatorParts& parts, std::string replica);

  // One pass at `now` (the coordinator's clock), unless the last one was less than
  // lease_s / 4 ago; returns when the next one is due.
  double pass(double now);
  // The next pass runs whenever it comes, however recent the last one (the store's wake-up
  // said something changed). Any thread.
  void wake() { woken_ = true; }
  // A client registered through some replica (the store's wake-up): the next pass reads the
  // clients that changed without waiting for kClientsEvery. Any thread.
  void clients_changed() { clients_changed_ = true; }
  // Gives up every lease this replica holds (a graceful stop), so that other replicas take
  // its jobs over at once instead of after their leases run out.
  void release_all();

 private:
  using Steady = std::chrono::steady_clock;
  // Renews the owned jobs' leases, stepping down where refused or run out.
  void renew(const std::map<JobId, storage::JobRecord>& stored);
  // Installs unknown jobs, takes the state and the newer models of unowned ones.
  void follow(const std::map<JobId, storage::JobRecord>& stored);
  // Loads `record`'s job from the store as this replica follows it (not owned) and takes it
  // in (JobTable::refresh).
  void load_followed(const storage::JobRecord& record);
  // Acquires one free job if this replica's share allows.
  void take_over(const std::vector<storage::LeaseRecord>& leases,
                 const std::map<JobId, storage::JobRecord>& stored);
  // Stops driving `job` (JobStatus::step_down), counted under `change`.
  void step_down(JobEntry& job, const std::string& why, const char* change);
  // Reads the clients that changed when due (see above); returns when it is next due.
  double refresh_clients(double now);

  CoordinatorParts t_;
  const std::string replica_;
  const double period_s_;
  std::map<JobId, Steady::time_point> valid_until_;  // of each owned job's lease, as renewed
  double next_pass_ = 0;
  std::atomic<bool> woken_{false};
  std::atomic<bool> clients_changed_{false};
  double next_client_refresh_ = 0, last_client_refresh_ = 0;
  double next_tenant_refresh_ = 0;
  std::mt19937_64 random_;
};

}  // namespace fedcase::server
