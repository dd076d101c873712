// The round driver's follower: a copy of another replica's round served here (its tasks handed
// out, its updates admitted and folded here), handed over as this replica's partial once the
// owner closes admission; and the secure stages' messages relayed both ways (round_driver.h).

#include <algorithm>

#include "common/crash_point.h"
#include "common/log.h"
#include "secagg/params.h"
#include "server/core/rounds/round_driver.h"

namespace fedcase::server {
namespace {

using rounds::Event;

std::string job_prefix(const JobEntry& job) { return "job " + std::to_string(job.id) + ": "; }

}  // namespace

bool RoundDriver::follow(JobEntry& job, const storage::RoundRecord& record, uint64_t read_wakes) {
  const uint64_t revision =
      record.plan.is_object() ? record.plan.value("revision", uint64_t{0}) : 0;
  const bool copied =
      jobs_.read(job, [](const JobStatus& s) { return s.phase == rounds::Phase::kFollowing; });
  if (copied) {
    // The owner's buffer handed out more tasks: the copy hands them out too.
    Result<std::vector<ClientId>> assigned = std::vector<ClientId>();
    jobs_.update(job, [&](JobStatus& s) {
      if (!s.round || s.round->index() != record.index) return;
      assigned = rounds::assign_from_plan(*s.round, record.plan);
      s.plan_revision = revision;
    });
    if (!assigned.ok()) {
      log_warn(job_prefix(job) + "cannot take the new tasks of buffer " +
               std::to_string(record.index) + ": " + assigned.status().to_string());
      return false;
    }
    tasks_ready_.notify(*assigned);
    return true;
  }
  rounds::Round::Spec spec;
  spec.index = record.index;
  spec.base_version = record.base_version;
  spec.opened_at = record.opened_at;
  spec.deadline = record.deadline;
  spec.target = record.target;
  spec.buffered = job.config.asynchronous();
  auto round = job.runtime->follow_round(spec, record.plan);
  if (!round.ok()) {
    log_warn(job_prefix(job) + "cannot serve round " + std::to_string(record.index) + ": " +
             round.status().to_string());
    return false;
  }
  std::vector<ClientId> invited;
  for (const auto& task : round->tasks()) invited.push_back(task.client);
  if (const auto& secure = job.config.secure_aggregation) {
    // Before the round is published: its invitees' first messages find their secure round.
    const uint64_t vector_length = job.runtime->update_layout().layout.element_count();
    auto params = secagg::round_params(*secure, invited.size(), vector_length);
    if (!params.ok()) {
      log_warn(job_prefix(job) + "cannot serve secure round " + std::to_string(record.index) +
               ": " + params.status().to_string());
      return false;
    }
    SecureRoundCopy::Setup setup;
    setup.job = job.id;
    setup.round = record.index;
    setup.invitees = invited;
    setup.vector_length = vector_length;
    setup.bits = params->bits;
    setup.degree = params->degree;
    setup.threads = job.config.aggregation.threads;
    setup.signing_keys = [this](const std::vector<ClientId>& clients) {
      return clients_.signing_keys(clients);
    };
    setup.relay = [this, id = job.id, index = record.index](const char* kind, ClientId client,
                                                            const std::string& body) {
      return replication_.relay(id, index, kind, client, body);
    };
    setup.behind = [this] {
      replication_.wake();
      wake();
    };
    secure_.serve_copy(
        job.id, std::make_shared<SecureRoundCopy>(std::move(setup), secure_.stage_notifier()));
  }
  publish_outcome(job, Event::kFollowed, [&](JobStatus& s) {
    s.read_round = std::max(s.read_round, record.index);
    s.read_wakes = read_wakes;
    s.round = std::move(round).value();
    s.plan_revision = revision;
  });
  log_info(job_prefix(job) + "serving round " + std::to_string(record.index) + " of its owner (" +
           std::to_string(invited.size()) + " invited, K " + std::to_string(record.target) + ")");
  tasks_ready_.notify(invited);
  return true;
}

bool RoundDriver::write_partial(JobEntry& job, double now) {
  // Decide: the copy admits nothing more; it is written once no upload is being folded.
  struct Taken {
    bool ready = false;
    RoundIndex index = 0;
    std::shared_ptr<rounds::RoundAggregate> aggregate;
    size_t accepted = 0;
  };
  const Taken taken = jobs_.update(job, [&](JobStatus& s) {
    Taken t;
    if (!s.round) return t;
    s.round->close();
    if (s.round->uploads_in_flight()) return t;
    t = {true, s.round->index(), s.round->aggregate(), s.round->accepted()};
    return t;
  });
  if (!taken.ready) return false;
  // Write: the partial, when there is one to write. A secure round's is the masked inputs its
  // copy folded.
  std::shared_ptr<SecureRoundCopy> secure = secure_.find_copy(job.id);
  if (secure && secure->index() != taken.index) secure = nullptr;
  if (taken.accepted > 0) {
    auto partial = secure ? Result<aggregation::EncodedPartial>(
                                aggregation::EncodedPartial{secure->partial(), 0, secure->inputs()})
                          : taken.aggregate->partial();
    Status written = partial.status();
    if (partial.ok()) {
      written =
          replication_.put_partial({job.id, taken.index, std::string(), partial->bytes,
                                    partial->weight, static_cast<uint64_t>(partial->updates), now});
    }
    if (written.code() == Code::kUnavailable) return false;  // again at the next tick
    if (written.ok()) {
      crash_point("partial_written");
      metrics_.add(metric::kPartials, {{"direction", "written"}});
      metrics_.add(metric::kPartialBytes, {{"direction", "written"}},
                   double(partial->bytes.size()));
      log_info(job_prefix(job) + "wrote its partial of round " + std::to_string(taken.index) +
               " (" + std::to_string(taken.accepted) + " updates, " +
               std::to_string(partial->bytes.size()) + " bytes)");
    } else {
      // Refused for good (the round concluded, or this replica's count disagrees with the
      // store's): the owner counts these updates as lost.
      log_warn(job_prefix(job) + "cannot write its partial of round " +
               std::to_string(taken.index) + ": " + written.to_string());
    }
  }
  // Publish: the copy of the round is gone; a secure copy relays the unmask stage on.
  publish_outcome(job, secure ? Event::kMaskedPartialWritten : Event::kPartialWritten,
                  [](JobStatus& s) {
                    s.round.reset();
                    s.plan_revision = 0;
                  });
  return true;
}

void RoundDriver::relay_stage_messages(JobEntry& job, bool owned) {
  if (!job.config.secure_aggregation || !replication_.shared()) return;
  if (owned) {
    std::shared_ptr<SecureRound> secure = secure_.find(job.id);
    const char* kind = secure ? secagg::client_kind(secure->stage()) : nullptr;
    if (!kind) return;
    auto messages = replication_.relayed(job.id, secure->index(), kind);
    if (!messages.ok()) {
      log_warn(job_prefix(job) + "cannot read the relayed stage messages of round " +
               std::to_string(secure->index()) + ": " + messages.status().to_string());
      return;
    }
    for (const auto& [client, body] : *messages) {
      const Status taken = secure->receive_relayed(kind, client, body);
      if (!taken.ok() && taken.code() != Code::kConflict && taken.code() != Code::kUnavailable) {
        metrics_.add(metric::kSecAggMessagesRefused,
                     {{"stage", secagg::stage_name(secure->stage())},
                      {"reason", code_name(taken.code())}});
      }
    }
    return;
  }
  std::shared_ptr<SecureRoundCopy> copy = secure_.find_copy(job.id);
  if (!copy) return;
  for (const char* kind :
       {stage_kind::kKeysReply, stage_kind::kForwarded, stage_kind::kUnmaskRequest}) {
    if (copy->published(kind)) continue;
    auto messages = replication_.published(job.id, copy->index(), kind);
    if (!messages.ok()) {
      log_warn(job_prefix(job) + "cannot read the stage messages of round " +
               std::to_string(copy->index()) + ": " + messages.status().to_string());
      return;
    }
    if (messages->empty()) return;  // the stages open in turn: the later ones are not out yet
    const Status published = copy->publish(kind, std::move(messages).value());
    if (published.code() == Code::kUnavailable) return;  // the next pass publishes it
    if (!published.ok()) {
      log_error(job_prefix(job) + "round " + std::to_string(copy->index()) +
                " is not served here: " + published.to_string());
      return;
    }
  }
}

}  // namespace fedcase::server
