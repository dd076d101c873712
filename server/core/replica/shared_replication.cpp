#include "server/core/replica/shared_replication.h"

#include <chrono>
#include <set>

#include "common/log.h"

namespace fedcase::server {
namespace {

// Readings not asked for in this long are not paced any more (their round concluded).
constexpr double kForgetAfterS = 2 * SharedReplication::kFollowEvery;

std::string round_name(JobId job, RoundIndex round) {
  return "round " + std::to_string(round) + " of job " + std::to_string(job);
}

}  // namespace

SharedReplication::SharedReplication(storage::Store& store, std::string replica, double lease_s)
    : store_(store), replica_(std::move(replica)), lease_s_(lease_s) {}

Status SharedReplication::open(storage::RoundRecord record, const rounds::Round& round) {
  record.target = round.target();
  record.plan = rounds::round_plan_json(round);
  return store_.open_round(record);
}

Status SharedReplication::replan(JobId job, RoundIndex round, const nlohmann::json& plan,
                                 storage::Epoch epoch) {
  return store_.update_round_plan(job, round, plan, epoch);
}

Result<bool> SharedReplication::admit(storage::UpdateRecord update) {
  update.replica = replica_;
  return store_.admit_update(update);
}

Status SharedReplication::withdraw(JobId job, RoundIndex round, ClientId client) {
  return store_.withdraw_update(job, round, client, replica_);
}

Result<bool> SharedReplication::delivered_elsewhere(JobId job, RoundIndex round, ClientId client) {
  return store_.has_update(job, round, client);
}

Status SharedReplication::close(JobId job, RoundIndex round, storage::Epoch epoch) {
  return store_.close_admission(job, round, epoch);
}

RoundReplication::Contributions SharedReplication::contributions(JobId job, RoundIndex round,
                                                                 std::optional<double> closed_at,
                                                                 double now) {
  Reading<Contributions>& r = contributions_[job];
  r.asked = now;
  if (r.round == round && !due(r, now)) return r.value;
  r.round = round;
  r.due = now + kContributionsEvery;
  r.wakes = wakes_.load();
  Contributions c;
  auto admission = store_.round_admission(job, round);
  if (!admission.ok()) {
    log_warn("cannot read the admission of " + round_name(job, round) + ": " +
             admission.status().to_string());
    return r.value = c;
  }
  c.admitted = admission->admitted();
  if (closed_at) {
    c.waited_out = now >= *closed_at + lease_s_;
    auto partials = store_.list_partials(job, round);
    if (partials.ok()) {
      std::set<std::string> written;
      for (const auto& p : *partials) written.insert(p.replica);
      c.partials_in = true;
      for (const auto& [replica, admitted] : admission->replicas) {
        if (replica != replica_ && admitted > 0 && !written.count(replica)) c.partials_in = false;
      }
    }
  }
  return r.value = c;
}

Result<RoundReplication::Gathered> SharedReplication::gather(JobId job, RoundIndex round) {
  auto partials = store_.list_partials(job, round);
  if (!partials.ok()) return partials.status();
  auto updates = store_.list_updates(job, round);
  if (!updates.ok()) return updates.status();
  return Gathered{std::move(partials).value(), std::move(updates).value()};
}

Status SharedReplication::put_partial(storage::PartialRecord partial) {
  partial.replica = replica_;
  return store_.put_partial(partial);
}

Status SharedReplication::publish_stage(JobId job, RoundIndex round, const char* kind,
                                        const std::map<ClientId, std::string>& messages) {
  std::vector<storage::StageMessage> out;
  out.reserve(messages.size());
  for (const auto& [client, body] : messages) out.push_back({job, round, kind, client, body});
  return store_.put_stage_messages(out);
}

Status SharedReplication::relay(JobId job, RoundIndex round, const char* kind, ClientId client,
                                const std::string& body) {
  return store_.put_stage_messages({{job, round, kind, client, body}});
}

Result<std::map<ClientId, std::string>> SharedReplication::messages(JobId job, RoundIndex round,
                                                                    const char* kind) {
  auto stored = store_.list_stage_messages(job, round, kind);
  if (!stored.ok()) return stored.status();
  std::map<ClientId, std::string> out;
  for (storage::StageMessage& m : *stored) out[m.client] = std::move(m.body);
  return out;
}

Result<std::map<ClientId, std::string>> SharedReplication::relayed(JobId job, RoundIndex round,
                                                                   const char* kind) {
  return messages(job, round, kind);
}

Result<std::map<ClientId, std::string>> SharedReplication::published(JobId job, RoundIndex round,
                                                                     const char* kind) {
  return messages(job, round, kind);
}

Result<RoundReplication::Followed> SharedReplication::followed(JobId job, double now) {
  Reading<Followed>& r = followed_[job];
  r.asked = now;
  if (!due(r, now)) return r.value;
  auto rounds = store_.list_rounds(job);
  if (!rounds.ok()) {
    log_warn("job " + std::to_string(job) +
             ": cannot read its rounds: " + rounds.status().to_string());
    return rounds.status();
  }
  r.due = now + kFollowEvery;
  r.wakes = wakes_.load();
  r.value.round =
      rounds->empty() ? std::nullopt : std::optional<storage::RoundRecord>(rounds->back());
  r.value.wakes = r.wakes;
  return r.value;
}

std::optional<double> SharedReplication::next_reading(double now) const {
  std::optional<double> next;
  auto consider = [&](double due, double asked) {
    if (now - asked > kForgetAfterS) return;
    if (!next || due < *next) next = due;
  };
  for (const auto& [job, r] : contributions_) consider(r.due, r.asked);
  for (const auto& [job, r] : followed_) consider(r.due, r.asked);
  return next;
}

WakeupThread::WakeupThread(storage::Store& store, std::function<void()> rounds,
                           std::function<void()> clients)
    : store_(store),
      rounds_(std::move(rounds)),
      clients_(std::move(clients)),
      thread_([this] { run(); }) {}

WakeupThread::~WakeupThread() { stop(); }

void WakeupThread::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void WakeupThread::run() {
  std::unique_ptr<storage::Listener> listener;
  while (!stop_) {
    if (!listener) {
      auto listening = store_.listen();
      if (!listening.ok()) {
        log_warn("cannot listen for the store's wake-ups: " + listening.status().to_string());
        for (int i = 0; i < 10 && !stop_; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        continue;
      }
      listener = std::move(listening).value();
      clients_();  // whatever happened before it listened
      rounds_();
      continue;
    }
    auto heard = listener->next(0.5);
    if (!heard.ok()) {  // wake-ups may have been missed; the next call reconnects
      clients_();
      rounds_();
      continue;
    }
    if (!*heard) continue;
    const storage::Channel channel = (*heard)->channel;
    if (channel == storage::Channel::kRound || channel == storage::Channel::kLease ||
        channel == storage::Channel::kJob) {
      rounds_();
    } else if (channel == storage::Channel::kClient) {
      clients_();
    }
  }
}

}  // namespace fedcase::server
