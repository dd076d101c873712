#include "server/core/shared_rounds.h"

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "common/log.h"
#include "secagg/config.h"
#include "server/core/secure_round_copy.h"

namespace fedcase::server {
namespace {

// How often the rounds of the jobs this replica does not own are read again without a
// wake-up (which may be lost).
constexpr double kFollowEvery = 1.0;

std::string job_prefix(JobId job) { return "job " + std::to_string(job) + ": "; }

bool running(JobState state) { return state == JobState::kRunning || state == JobState::kPaused; }

}  // namespace

SharedRounds::SharedRounds(storage::Store& store, JobTable& jobs, TaskNotifier& tasks_ready,
                           SecureRounds& secure, Metrics& metrics, std::string replica)
    : store_(store),
      jobs_(jobs),
      tasks_ready_(tasks_ready),
      secure_(secure),
      metrics_(metrics),
      replica_(std::move(replica)) {}

double SharedRounds::follow(double now) {
  if (now < next_ && !woken_.exchange(false)) return next_;
  next_ = now + kFollowEvery;
  struct Followed {
    JobEntry* job = nullptr;
    std::optional<RoundIndex> copy;  // the round this replica serves a copy of
    uint64_t version = 0;            // the model version it holds
  };
  std::vector<Followed> followed;
  std::set<JobId> copies_kept;
  jobs_.update_each([&](JobEntry& job, const JobStatus& status) {
    if (status.owned) return;
    const bool copy = status.round && status.mirrored;
    if (!copy && !running(status.state)) return;
    followed.push_back({&job,
                        copy ? std::optional<RoundIndex>(status.round->index()) : std::nullopt,
                        status.model->version});
  });
  for (const Followed& f : followed) {
    copies_kept.insert(f.job->id);
    auto rounds = store_.list_rounds(f.job->id);
    if (!rounds.ok()) {
      log_warn(job_prefix(f.job->id) + "cannot read its rounds: " + rounds.status().to_string());
      continue;
    }
    follow_secure(*f.job, *rounds);
    if (f.copy) {
      const storage::RoundRecord* record = nullptr;
      for (const auto& r : *rounds) {
        if (r.index == *f.copy) record = &r;
      }
      const bool concluded = record == nullptr || record->state != RoundState::kOpen;
      if (concluded || !record->admitting) close(*f.job, *f.copy, concluded, now);
      continue;  // a new round is served from the next pass, once this copy is gone
    }
    if (rounds->empty()) continue;
    const storage::RoundRecord& latest = rounds->back();
    const bool served_here = latest.state == RoundState::kOpen && latest.admitting &&
                             latest.target > 0 && !latest.plan.empty();
    if (served_here && latest.base_version == f.version) serve(*f.job, latest);
  }
  // A job owned here now, or no longer running, keeps no copy.
  for (JobId job : secure_.copied_jobs()) {
    if (!copies_kept.count(job)) secure_.drop_copy(job, "this replica no longer follows the job");
  }
  return next_;
}

void SharedRounds::follow_secure(JobEntry& job, const std::vector<storage::RoundRecord>& rounds) {
  std::shared_ptr<SecureRoundCopy> copy = secure_.find_copy(job.id);
  if (!copy) return;
  const storage::RoundRecord* record = nullptr;
  for (const auto& r : rounds) {
    if (r.index == copy->index()) record = &r;
  }
  if (record == nullptr || record->state != RoundState::kOpen) {
    secure_.drop_copy(job.id, "round " + std::to_string(copy->index()) + " of job " +
                                  std::to_string(job.id) + " is over");
    return;
  }
  for (const char* kind :
       {stage_kind::kKeysReply, stage_kind::kForwarded, stage_kind::kUnmaskRequest}) {
    if (copy->published(kind)) continue;
    auto messages = store_.list_stage_messages(job.id, copy->index(), kind);
    if (!messages.ok()) {
      log_warn(job_prefix(job.id) + "cannot read the stage messages of round " +
               std::to_string(copy->index()) + ": " + messages.status().to_string());
      return;
    }
    if (messages->empty()) return;  // the stages open in turn: the later ones are not out yet
    std::map<ClientId, std::string> by_client;
    for (storage::StageMessage& m : *messages) by_client[m.client] = std::move(m.body);
    copy->publish(kind, std::move(by_client));
  }
}

void SharedRounds::serve_secure(JobEntry& job, const storage::RoundRecord& record,
                                const std::vector<ClientId>& invited) {
  const uint64_t vector_length = job.runtime->model()->layout.element_count();
  auto params =
      secagg::round_params(*job.config.secure_aggregation, invited.size(), vector_length);
  if (!params.ok()) {
    log_warn(job_prefix(job.id) + "cannot serve secure round " + std::to_string(record.index) +
             ": " + params.status().to_string());
    return;
  }
  SecureRoundCopy::Setup setup;
  setup.job = job.id;
  setup.round = record.index;
  setup.invitees = invited;
  setup.vector_length = vector_length;
  setup.bits = params->bits;
  setup.threads = job.config.aggregation.threads;
  secure_.serve_copy(job.id, std::make_shared<SecureRoundCopy>(setup, store_,
                                                               secure_.stage_notifier()));
}

void SharedRounds::serve(JobEntry& job, const storage::RoundRecord& record) {
  rounds::Round::Spec spec;
  spec.index = record.index;
  spec.base_version = record.base_version;
  spec.opened_at = record.opened_at;
  spec.deadline = record.deadline;
  spec.target = record.target;
  auto round = job.runtime->follow_round(spec, record.plan);
  if (!round.ok()) {
    log_warn(job_prefix(job.id) + "cannot serve round " + std::to_string(record.index) + ": " +
             round.status().to_string());
    return;
  }
  const std::vector<ClientId> invited = round->invited();
  // Before the round is published: its invitees' first messages find their secure round.
  if (job.config.secure_aggregation) serve_secure(job, record, invited);
  const bool published = jobs_.update(job, [&](JobStatus& status) {
    const bool changed = status.owned || status.round || status.model->version != spec.base_version;
    if (changed) return false;
    status.round = std::move(round).value();
    status.shared_round = true;
    status.mirrored = true;
    status.spoilt = false;
    return true;
  });
  if (!published) return;
  log_info(job_prefix(job.id) + "serving round " + std::to_string(record.index) +
           " of its owner (" + std::to_string(invited.size()) + " invited, K " +
           std::to_string(record.target) + ")");
  tasks_ready_.notify(invited);
}

void SharedRounds::close(JobEntry& job, RoundIndex index, bool concluded, double now) {
  // Decide: the copy admits nothing more; it is written once no upload is being folded.
  struct Taken {
    bool ready = false;
    std::shared_ptr<rounds::RoundAggregate> aggregate;
    size_t accepted = 0;
    bool spoilt = false;
  };
  const Taken taken = jobs_.update(job, [&](JobStatus& status) {
    Taken t;
    if (!status.round || !status.mirrored || status.round->index() != index) return t;
    status.round->close();
    if (status.round->uploads_in_flight()) return t;
    t = {true, status.round->aggregate(), status.round->accepted(), status.spoilt};
    return t;
  });
  if (!taken.ready) return;
  // Write: the partial, when there is one to write.
  if (!concluded && taken.accepted > 0 && !taken.spoilt) {
    // A secure round's partial is the masked inputs folded by its copy.
    std::shared_ptr<SecureRoundCopy> secure = secure_.find_copy(job.id);
    auto partial = secure && secure->index() == index
                       ? Result<aggregation::EncodedPartial>(
                             aggregation::EncodedPartial{secure->partial(), 0, secure->inputs()})
                       : taken.aggregate->partial();
    Status written = partial.status();
    std::string bytes;
    if (partial.ok()) {
      bytes = std::move(partial->bytes);
      written = store_.put_partial({job.id, index, replica_, bytes, partial->weight,
                                    static_cast<uint64_t>(partial->updates), now});
    }
    if (written.code() == Code::kUnavailable) return;  // the next pass tries again
    if (written.ok()) {
      metrics_.add(metric::kPartials, {{"direction", "written"}});
      metrics_.add(metric::kPartialBytes, {{"direction", "written"}}, double(bytes.size()));
      log_info(job_prefix(job.id) + "wrote its partial of round " + std::to_string(index) + " (" +
               std::to_string(taken.accepted) + " updates, " + std::to_string(bytes.size()) +
               " bytes)");
    } else {
      log_warn(job_prefix(job.id) + "cannot write its partial of round " + std::to_string(index) +
               ": " + written.to_string());
    }
  } else if (taken.spoilt) {
    log_warn(job_prefix(job.id) + "round " + std::to_string(index) +
             ": no partial written, an update was folded without being recorded");
  }
  // Publish: the copy is gone.
  jobs_.update(job, [&](JobStatus& status) {
    if (!status.round || !status.mirrored || status.round->index() != index) return;
    status.round.reset();
    status.shared_round = false;
    status.mirrored = false;
    status.spoilt = false;
  });
}

WakeupThread::WakeupThread(storage::Store& store, std::function<void()> woken)
    : store_(store), woken_(std::move(woken)), thread_([this] { run(); }) {}

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
      woken_();  // whatever happened before it listened
      continue;
    }
    auto heard = listener->next(0.5);
    if (!heard.ok()) {
      woken_();  // wake-ups may have been missed; the next call reconnects
      continue;
    }
    if (!*heard) continue;
    const storage::Channel channel = (*heard)->channel;
    if (channel == storage::Channel::kRound || channel == storage::Channel::kLease ||
        channel == storage::Channel::kJob) {
      woken_();
    }
  }
}

}  // namespace fedcase::server
