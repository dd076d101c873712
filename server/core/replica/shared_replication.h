#pragma once
// Replication for coordinator replicas on one database (docs/scaling.md): the RoundReplication
// (rounds/replication.h) through the store, and the thread that hears the store's wake-ups.
//
// The owner of a shared round records it with its K and plan; the store admits updates among
// those K places whichever replica receives them; each replica folds what it admits into its
// own partial aggregate and writes it once the owner closes admission; the owner reads the
// admission (K reached?) and the partials at a pace of kContributionsEvery seconds, and a
// replica reads the newest round of each job it does not own every kFollowEvery seconds; a
// store wake-up (LISTEN/NOTIFY) makes every next reading immediate. Secure stage messages pass
// through the store's stage_messages. Tensors never travel through notifications.
//
// Thread safety: wake(), and the calls a request makes (admit, withdraw, delivered_elsewhere,
// relay), may come from any thread; the paced readings (contributions, followed,
// next_reading) and the owner's and follower's other calls from the round driver's thread.

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "server/core/rounds/replication.h"

namespace fedcase::server {

class SharedReplication final : public RoundReplication {
 public:
  // How often the owner reads its open rounds' admission and partials, and a replica the
  // rounds of the jobs it follows, without a wake-up (which may be lost).
  static constexpr double kContributionsEvery = 0.25;
  static constexpr double kFollowEvery = 1.0;

  // `store` must outlive the object. `replica` names this replica in the store; `lease_s` is
  // how long an owner waits after the close for the partials of replicas holding updates.
  SharedReplication(storage::Store& store, std::string replica, double lease_s);

  bool shared() const override { return true; }
  const std::string& replica() const override { return replica_; }
  void wake() override { wakes_ += 1; }
  uint64_t wakes() const override { return wakes_.load(); }

  Status open(storage::RoundRecord record, const rounds::Round& round) override;
  Status replan(JobId job, RoundIndex round, const nlohmann::json& plan,
                storage::Epoch epoch) override;
  Result<bool> admit(storage::UpdateRecord update) override;
  Status withdraw(JobId job, RoundIndex round, ClientId client) override;
  Result<bool> delivered_elsewhere(JobId job, RoundIndex round, ClientId client) override;
  Status close(JobId job, RoundIndex round, storage::Epoch epoch) override;
  Contributions contributions(JobId job, RoundIndex round, std::optional<double> closed_at,
                              double now) override;
  Result<Gathered> gather(JobId job, RoundIndex round) override;
  Status put_partial(storage::PartialRecord partial) override;
  Status publish_stage(JobId job, RoundIndex round, const char* kind,
                       const std::map<ClientId, std::string>& messages) override;
  Status relay(JobId job, RoundIndex round, const char* kind, ClientId client,
               const std::string& body) override;
  Result<std::map<ClientId, std::string>> relayed(JobId job, RoundIndex round,
                                                  const char* kind) override;
  Result<std::map<ClientId, std::string>> published(JobId job, RoundIndex round,
                                                    const char* kind) override;
  Result<Followed> followed(JobId job, double now) override;
  std::optional<double> next_reading(double now) const override;

 private:
  // The last reading of one job's store state, and when the next one is due.
  template <class Value>
  struct Reading {
    Value value{};
    RoundIndex round = 0;  // contributions: the round read
    double due = 0;
    double asked = 0;    // when it was last asked for (readings not asked lately are not paced)
    uint64_t wakes = 0;  // wakes_ when it was read
  };
  // Whether `r` must be read again now.
  template <class Value>
  bool due(const Reading<Value>& r, double now) const {
    return now >= r.due || r.wakes != wakes_.load();
  }
  Result<std::map<ClientId, std::string>> messages(JobId job, RoundIndex round, const char* kind);

  storage::Store& store_;
  const std::string replica_;
  const double lease_s_;
  std::atomic<uint64_t> wakes_{0};
  std::map<JobId, Reading<Contributions>> contributions_;  // the driver's thread only
  std::map<JobId, Reading<Followed>> followed_;
};

// The store's wake-ups (Store::listen) on a thread of its own: `woken` runs on that thread for
// every kRound, kLease or kJob wake-up (`rounds`), for every kClient one (`clients`: a client
// registered), and for both whenever some may have been missed (the listener lost its
// connection: re-read everything); each must be quick. A store that cannot listen now is
// asked again every second; the replicas' paced reads cover the meantime.
class WakeupThread {
 public:
  // `store` must outlive the object.
  WakeupThread(storage::Store& store, std::function<void()> rounds, std::function<void()> clients);
  ~WakeupThread();  // stop()
  // Stops and joins the thread (within about half a second). Idempotent.
  void stop();

 private:
  void run();

  storage::Store& store_;
  const std::function<void()> rounds_, clients_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace fedcase::server
