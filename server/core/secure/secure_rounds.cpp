#include "server/core/secure/secure_rounds.h"

#include <algorithm>
#include <utility>

namespace fedcase::server {

SecureRounds::SecureRounds(Metrics& metrics, std::function<void()> wake_driver)
    : metrics_(metrics), wake_driver_(std::move(wake_driver)) {}

std::shared_ptr<SecureRound> SecureRounds::open(SecureRound::Setup setup) {
  const JobId job = setup.job;
  std::sort(setup.invitees.begin(), setup.invitees.end());
  std::shared_ptr<SecureRound> opened =
      SecureRound::open(std::move(setup), stage_ready_, wake_driver_, metrics_);
  {
    MutexLock lock(mu_);
    rounds_[job] = opened;
  }
  // A round that could not start has no stage deadline: the driver fails it at once.
  if (opened->stage() == SecureRound::Stage::kFailed) wake_driver_();
  return opened;
}

std::shared_ptr<SecureRound> SecureRounds::find(JobId job) const {
  MutexLock lock(mu_);
  auto it = rounds_.find(job);
  return it == rounds_.end() ? nullptr : it->second;
}

void SecureRounds::close(JobId job, const SecureRound& round) {
  MutexLock lock(mu_);
  auto it = rounds_.find(job);
  if (it != rounds_.end() && it->second.get() == &round) rounds_.erase(it);
}

std::vector<std::shared_ptr<SecureRound>> SecureRounds::all() const {
  std::vector<std::shared_ptr<SecureRound>> out;
  MutexLock lock(mu_);
  for (const auto& [job, round] : rounds_) out.push_back(round);
  return out;
}

std::optional<double> SecureRounds::next_deadline(double now) const {
  std::optional<double> next;
  for (const auto& round : all()) {
    const std::optional<double> deadline = round->next_deadline(now);
    if (deadline && (!next || *deadline < *next)) next = deadline;
  }
  return next;
}

uint64_t SecureRounds::watch(ClientId client, std::function<void()> wake) {
  return stage_ready_.watch(client, std::move(wake));
}

void SecureRounds::unwatch(ClientId client, uint64_t handle) {
  stage_ready_.cancel(client, handle);
}

void SecureRounds::serve_copy(JobId job, std::shared_ptr<SecureRoundCopy> copy) {
  std::shared_ptr<SecureRoundCopy> earlier;
  {
    MutexLock lock(mu_);
    earlier = std::exchange(copies_[job], std::move(copy));
  }
  if (earlier) earlier->end("round " + std::to_string(earlier->index()) + " is over");
}

std::shared_ptr<SecureRoundCopy> SecureRounds::find_copy(JobId job) const {
  MutexLock lock(mu_);
  auto it = copies_.find(job);
  return it == copies_.end() ? nullptr : it->second;
}

void SecureRounds::drop_copy(JobId job, const std::string& why) {
  std::shared_ptr<SecureRoundCopy> dropped;
  {
    MutexLock lock(mu_);
    auto it = copies_.find(job);
    if (it == copies_.end()) return;
    dropped = std::move(it->second);
    copies_.erase(it);
  }
  dropped->end(why);
}

std::vector<JobId> SecureRounds::copied_jobs() const {
  std::vector<JobId> out;
  MutexLock lock(mu_);
  for (const auto& [job, copy] : copies_) out.push_back(job);
  return out;
}

std::shared_ptr<SecureStages> SecureRounds::stages(JobId job) const {
  MutexLock lock(mu_);
  std::shared_ptr<SecureStages> own, copy;
  if (auto it = rounds_.find(job); it != rounds_.end()) own = it->second;
  if (auto it = copies_.find(job); it != copies_.end()) copy = it->second;
  // A replica that stepped down may still hold its last round: the later round is served.
  if (own && copy) return copy->index() > own->index() ? copy : own;
  return own ? own : copy;
}

}  // namespace fedcase::server
