// The coordinator's client operations (coordinator.h): registration and contacts, tasks,
// downloads of a task's model and module, updates and masked inputs, secure stages.

#include <algorithm>
#include <chrono>
#include <set>

#include "common/crash_point.h"
#include "common/log.h"
#include "protocol/registration.h"
#include "protocol/update_meta.h"
#include "protocol/version.h"
#include "rounds/upload.h"
#include "server/core/coordinator.h"
#include "server/core/coordinator_state.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

// Whether `client` (when a client asks) holds a task of `job`'s open round, for a model of
// `version` (when one is asked for); kPermissionDenied otherwise.
Status check_participant(const JobEntry& job, const JobStatus& status,
                         std::optional<ClientId> client, std::optional<uint64_t> version) {
  if (!client) return ok_status();
  const bool holds = status.round && status.round->holds_task(*client) &&
                     (!version || *version == status.round->terms_for(*client)->base_version);
  if (holds) return ok_status();
  return permission_denied("client " + std::to_string(*client) + " holds no task of job " +
                           std::to_string(job.id) +
                           (version ? " on model version " + std::to_string(*version) : ""));
}

// The tensors `job` trains, by name, when it trains part of its model; empty when it trains
// it whole.
std::vector<std::string> trained_tensors(const JobEntry& job) {
  std::vector<std::string> names;
  if (job.update.whole) return names;
  for (const TensorSpec& tensor : job.update.layout.tensors) names.push_back(tensor.name);
  return names;
}

// The offer of `client`'s `task` in round `r` of `job`.
TaskOffer task_offer(const CoordinatorConfig& config, const JobEntry& job, const rounds::Round& r,
                     ClientId client, const scheduling::ClientTask& task) {
  const rounds::EvaluationConfig& evaluation = job.config.evaluation;
  const rounds::Round::Terms& terms = *r.terms_for(client);
  TaskOffer offer{
      job.id,
      terms.round,
      job.config.model,
      job.config.loss,
      terms.base_version,
      terms.base_checksum,
      job.module_checksum,
      terms.deadline,
      job.config.training.local_epochs,
      evaluation.federated ? std::optional<size_t>(evaluation.max_samples) : std::nullopt,
      task,
      job.config.secure_aggregation
          ? std::optional<double>(job.config.secure_aggregation->stage_seconds)
          : std::nullopt,
      job.local_buffers,
      trained_tensors(job),
      job.config.compression,
      rounds::check_chunked_upload(job.config).ok() ? config.upload_chunk_bytes : 0};
  if (job.config.secure_aggregation && job.config.asynchronous()) {
    if (r.in_cohort(client)) {
      // Its cohort's stages, in the buffer's round: the key stages and the masked inputs
      // each close within stage_seconds (the inputs are computed already).
      constexpr double kCohortStages = 3;
      offer.round = r.index();
      offer.deadline = *r.cohort_opened_at() +
                       kCohortStages * job.config.secure_aggregation->stage_seconds;
      offer.staleness_factor = rounds::staleness_weight(job.config.async, r.staleness(client));
    } else {
      offer.ready = true;
    }
  }
  return offer;
}

// Whether an asynchronous job's buffer is between two versions here: its tasks carry over to
// the next buffer, whose updates are taken in a moment.
bool between_buffers(const JobEntry& job, const JobStatus& status) {
  return job.config.asynchronous() && status.active() && !status.round &&
         (status.concluding() || status.phase == rounds::Phase::kIdle);
}

std::string round_name(JobId job, RoundIndex round) {
  return "round " + std::to_string(round) + " of job " + std::to_string(job);
}

}  // namespace

Result<ClientRegistry::Registration> Coordinator::register_client(const json& request) {
  auto registration = protocol::read_registration(request);
  if (!registration.ok()) return registration.status();
  FEDCASE_RETURN_IF_ERROR(protocol::check_sdk_version(registration->protocol_version));
  return state_->clients.register_client(*registration, state_->clock());
}

Status Coordinator::heartbeat(ClientId client, const json& request) {
  if (!request.is_object()) return invalid_argument("request body must be a JSON object");
  return state_->clients.touch(client, state_->clock());
}

Result<std::optional<TaskOffer>> Coordinator::next_task(ClientId client) {
  State& s = *state_;
  const double now = s.clock();
  FEDCASE_RETURN_IF_ERROR(s.clients.touch(client, now));
  // The rounds of this call whose replicas said the client delivered nothing there yet.
  std::set<std::pair<JobId, RoundIndex>> checked;
  for (;;) {
    // Decide: the first open round that holds a task the client may fetch. A round every
    // replica serves is asked about first: the client may have delivered through another.
    std::optional<TaskOffer> offer;
    std::optional<std::pair<JobEntry*, RoundIndex>> ask;
    s.jobs.update_each([&](JobEntry& job, JobStatus& status) {
      if (offer || ask || !status.round) return;
      rounds::Round& r = *status.round;
      const scheduling::ClientTask* task = r.task_for(client);
      if (!task || r.admission(client, now) != rounds::Admission::kWanted) return;
      if (s.replication->shared() && !checked.count({job.id, r.index()})) {
        ask = {&job, r.index()};
        return;
      }
      r.hand_out(client, now);
      offer = task_offer(s.config, job, r, client, *task);
    });
    if (offer) s.metrics.add(metric::kCheckIns, {{"answer", "task"}});
    if (!ask) return offer;
    // Read: a store that cannot answer hands the task out (the upload's admission decides).
    JobEntry* job = ask->first;
    const RoundIndex round = ask->second;
    auto delivered = s.replication->delivered_elsewhere(job->id, round, client);
    if (!delivered.ok() || !*delivered) {
      checked.insert({job->id, round});
      continue;
    }
    // Publish: the round's copy learns that this client delivered.
    s.jobs.update(*job, [&](JobStatus& status) {
      if (status.round && status.round->index() == round) status.round->admitted_elsewhere(client);
    });
  }
}

bool Coordinator::wants_clients() const {
  State& s = *state_;
  const size_t invitations = s.jobs.invitations_per_round();
  if (invitations == 0) return false;
  const double pool = s.config.pace.pool_factor * double(invitations);
  return double(s.clients.available_count(s.clock())) < pool;
}

Result<protocol::CheckIn> Coordinator::check_in_later(ClientId client, double awake_s) {
  State& s = *state_;
  const scheduling::PaceConfig& pace = s.config.pace;
  const double wanted = pace.pool_factor * double(s.jobs.invitations_per_round());
  const double period = scheduling::check_in_period(pace, s.clients.size(), wanted, awake_s);
  scheduling::CheckInWindow window =
      scheduling::check_in_window(pace, period, s.clients.utility_rank(client));
  // A client whose update waits for a cohort checks in within half a key stage: its cohort's
  // stages do not wait for a device asleep.
  s.jobs.update_each([&](JobEntry& job, JobStatus& status) {
    const auto& secure = job.config.secure_aggregation;
    if (!secure || !status.round) return;
    const std::vector<ClientId>& ready = status.round->ready();
    if (std::find(ready.begin(), ready.end(), client) == ready.end()) return;
    window.earliest_s = 0;
    window.latest_s = std::min(window.latest_s, secure->stage_seconds / 2);
  });
  const double now = s.clock();
  FEDCASE_RETURN_IF_ERROR(s.clients.steer(client, now, now + window.latest_s));
  s.metrics.add(metric::kCheckIns, {{"answer", "later"}});
  s.metrics.set(metric::kCheckInPeriod, {}, period);
  return protocol::CheckIn{window.earliest_s, window.latest_s, pace.reconnect_window_s};
}

uint64_t Coordinator::watch_tasks(ClientId client, std::function<void()> wake) {
  return state_->tasks_ready.watch(client, std::move(wake));
}

void Coordinator::unwatch_tasks(ClientId client, uint64_t handle) {
  state_->tasks_ready.cancel(client, handle);
}

Result<ModelDownload> Coordinator::model(JobId job_id, uint64_t version, Scope scope,
                                         std::optional<ClientId> client) {
  State& s = *state_;
  auto job = s.find_job(job_id, scope);
  if (!job.ok()) return job.status();
  bool behind = false;
  auto latest = s.jobs.read(**job, [&](const JobStatus& status) -> Result<ModelDownload> {
    const auto& m = status.model;
    const Status participant = check_participant(**job, status, client, version);
    if (!participant.ok()) {
      // A task on the newest model (or a newer one) may be of a round not followed here yet.
      behind = version >= m->version && s.reading_pending(status);
      return participant;
    }
    if (m->version != version) return ModelDownload{};  // an older one: from the store
    return ModelDownload{version, m->checksum, std::shared_ptr<const std::string>(m, &m->blob)};
  });
  if (behind) {
    return s.not_followed_yet("the round on model version " + std::to_string(version) +
                              " of job " + std::to_string(job_id));
  }
  if (!latest.ok() || latest->blob) return latest;
  auto record = s.store->get_model(job_id, version);
  if (!record.ok()) return record.status();
  return ModelDownload{version, record->checksum,
                       std::make_shared<const std::string>(std::move(record->blob))};
}

Result<ModelDownload> Coordinator::trainable_part(JobId job_id, uint64_t version, Scope scope,
                                                  std::optional<ClientId> client) {
  auto whole = model(job_id, version, scope, client);
  if (!whole.ok()) return whole.status();
  const rounds::UpdateLayout& part = (**state_->find_job(job_id, scope)).update;
  if (part.whole) return not_found("job " + std::to_string(job_id) + " trains its whole model");
  // The part's values are read where they lie in the (checked) blob: no copy of the whole.
  BlobView view;
  FEDCASE_RETURN_IF_ERROR(view_blob(*whole->blob, whole->blob->size(), view));
  ModelBlob trainable{version, part.layout, {}};
  trainable.data.reserve(part.layout.element_count());
  for (const rounds::UpdateLayout::Slice& slice : part.slices) {
    trainable.data.insert(trainable.data.end(), view.values + slice.offset,
                          view.values + slice.offset + slice.count);
  }
  auto blob = std::make_shared<const std::string>(encode_blob(trainable));
  return ModelDownload{version, blob_checksum(*blob), std::move(blob)};
}

Result<ModuleDownload> Coordinator::module(JobId job_id, Scope scope,
                                           std::optional<ClientId> client) {
  auto job = state_->find_job(job_id, scope);
  if (!job.ok()) return job.status();
  const JobEntry& entry = **job;
  FEDCASE_RETURN_IF_ERROR(state_->jobs.read(entry, [&](const JobStatus& status) {
    return check_participant(entry, status, client, std::nullopt);
  }));
  if (!entry.module) return not_found("job " + std::to_string(job_id) + " has no module");
  return ModuleDownload{entry.module_checksum, entry.module};
}

Result<rounds::Admission> Coordinator::task_status(ClientId client, JobId job_id,
                                                   RoundIndex round) {
  State& s = *state_;
  const double now = s.clock();
  auto job = s.find_job(job_id);
  if (!job.ok()) return job.status();
  bool behind = false;
  const rounds::Admission admission = s.jobs.read(**job, [&](const JobStatus& status) {
    behind = s.may_be_behind(status, round);
    if (!status.round) {
      // An asynchronous job commits between two buffers: its tasks carry over.
      return between_buffers(**job, status) ? rounds::Admission::kHeld : rounds::Admission::kClosed;
    }
    if (!status.round->check_task_round(client, round).ok()) return rounds::Admission::kClosed;
    return status.round->admission(client, now);
  });
  if (behind) return s.not_followed_yet(round_name(job_id, round));
  return admission;
}

Result<UpdateAccepted> Coordinator::submit_update(ClientId client, JobId job_id,
                                                  RoundIndex round_index,
                                                  const Result<json>& meta_json,
                                                  std::string_view bytes, double upload_seconds) {
  return submit_blob(client, job_id, round_index, meta_json, bytes, upload_seconds,
                     state_->config.max_upload_bytes);
}

Result<UpdateAccepted> Coordinator::submit_blob(ClientId client, JobId job_id,
                                                RoundIndex round_index,
                                                const Result<json>& meta_json,
                                                std::string_view bytes, double upload_seconds,
                                                uint64_t max_bytes) {
  return admit_upload(
      client, job_id, round_index, /*masked=*/false, meta_json, bytes.size(), upload_seconds,
      [&](const JobEntry& job, const HeldPlace& held, const protocol::UpdateMeta& meta,
          const std::function<Status()>& admit) {
        // The update's values are validated and folded where they lie in the request body.
        BlobView update;
        FEDCASE_RETURN_IF_ERROR(view_blob(bytes, max_bytes, update));
        FEDCASE_RETURN_IF_ERROR(rounds::check_upload(
            job.update.layout, held.trained_on, held.round, job.config, update, meta.evaluation));
        FEDCASE_RETURN_IF_ERROR(admit());
        return held.aggregate->add(update, meta.samples, held.discount);
      });
}

Result<UpdateAccepted> Coordinator::submit_masked_input(
    ClientId client, JobId job_id, RoundIndex round_index, const Result<json>& header_json,
    const Result<json>& meta_json, std::string_view body, double upload_seconds) {
  return admit_upload(
      client, job_id, round_index, /*masked=*/true, meta_json, body.size(), upload_seconds,
      [&](const JobEntry& job, const HeldPlace& held, const protocol::UpdateMeta& meta,
          const std::function<Status()>& admit) {
        auto header = header_json.ok() ? protocol::read_secagg_masked_input(*header_json)
                                       : Result<protocol::SecAggMaskedInput>(header_json.status());
        if (!header.ok()) return header.status();
        FEDCASE_RETURN_IF_ERROR(
            rounds::check_evaluation(held.trained_on, held.round, job.config, meta.evaluation));
        auto secure = secure_round(job_id, held.round);
        if (!secure.ok()) return secure.status();
        return (*secure)->receive_masked_input(client, *header, body, admit);
      });
}

Result<UpdateAccepted> Coordinator::admit_upload(ClientId client, JobId job_id,
                                                 RoundIndex round_index, bool masked,
                                                 const Result<json>& meta_json, size_t body_bytes,
                                                 double upload_seconds, const FoldUpload& fold) {
  State& s = *state_;
  auto found = s.find_job(job_id);
  if (!found.ok()) return found.status();
  JobEntry* job = *found;
  if (bool(job->config.secure_aggregation) != masked) {
    return conflict(masked ? "job " + std::to_string(job_id) +
                                 " does not use secure aggregation: upload the update itself"
                           : "job " + std::to_string(job_id) +
                                 " uses secure aggregation: send the masked input to the "
                                 "task's secure_aggregation.masked_input_url");
  }
  // Decide: the state checks come first and hold one of the round's places for this upload.
  bool behind = false;
  auto held = s.jobs.update(*job, [&](JobStatus& status) -> Result<HeldPlace> {
    behind = s.may_be_behind(status, round_index);
    if (behind) return HeldPlace{};  // answered below, without the lock
    if (!status.round) {
      if (between_buffers(*job, status)) {
        return unavailable("job " + std::to_string(job_id) +
                           " is committing a model version; retry shortly");
      }
      return conflict(round_name(job_id, round_index) + " is not open for updates");
    }
    rounds::Round& r = *status.round;
    FEDCASE_RETURN_IF_ERROR(r.check_task_round(client, round_index));
    auto reserved = r.reserve(client, s.clock());
    if (!reserved.ok()) return reserved.status();
    return HeldPlace{*reserved,
                     r.index(),
                     r.terms_for(client)->base_version,
                     rounds::staleness_weight(job->config.async, r.staleness(client)),
                     status.model,
                     rounds::samples_allowed(*r.task_for(client))};
  });
  if (behind) return s.not_followed_yet(round_name(job_id, round_index));
  if (!held.ok()) return held.status();
  // A refused upload gives its place back (its admission withdrawn, once admitted); the round
  // may be due once no upload is in flight.
  const RoundIndex round = held->round;
  bool admitted = false;
  auto refuse = [&](Status why) -> Result<UpdateAccepted> {
    if (admitted) {
      Status withdrawn = s.replication->withdraw(job_id, round, client);
      if (!withdrawn.ok())
        log_warn("cannot withdraw an update's admission: " + withdrawn.to_string());
    }
    const bool due = s.jobs.update(*job, [&](JobStatus& status) {
      if (!status.round || status.round->index() != round) return false;
      status.round->release(client);
      return status.round->due(s.clock());
    });
    if (due) s.driver.wake();
    return why;
  };
  // Write, without any lock: parse, validate, admit the update, fold it in.
  auto meta = meta_json.ok() ? protocol::read_update_meta(*meta_json)
                             : Result<protocol::UpdateMeta>(meta_json.status());
  if (!meta.ok()) return refuse(meta.status());
  Status bounded = rounds::check_samples(*meta, held->samples_allowed);
  if (!bounded.ok()) return refuse(bounded);
  const double now = s.clock();
  bool filled = false;
  std::chrono::steady_clock::time_point admitted_at;
  auto admit = [&]() -> Status {
    auto answer = s.replication->admit({job_id, round, client, *meta_json, now});
    if (!answer.ok()) return answer.status();
    admitted = true;
    filled = *answer;
    crash_point("admitted");
    admitted_at = std::chrono::steady_clock::now();
    return ok_status();
  };
  Status folded = fold(*job, *held, *meta, admit);
  if (!folded.ok()) return refuse(folded);
  crash_point("folded");
  const double fold_s =
      admitted
          ? std::chrono::duration<double>(std::chrono::steady_clock::now() - admitted_at).count()
          : 0;
  s.metrics.observe(metric::kFoldSeconds, {}, fold_s);
  // Publish.
  const scheduling::RoundReport report =
      rounds::completion_report(*meta, held->model->blob.size(), body_bytes, upload_seconds);
  rounds::ProfileChange completed;
  UpdateAccepted accepted{round, 0};
  uint64_t staleness = 0;
  s.jobs.update(*job, [&](JobStatus& status) {
    rounds::Round& r = *status.round;  // a round with a reservation in flight stays open
    staleness = r.staleness(client);
    completed = r.accept(client, report, now, fold_s, std::move(meta->evaluation));
    accepted.updates = r.accepted();
  });
  if (job->config.asynchronous()) {
    s.metrics.observe(metric::kUpdateStaleness, {}, double(staleness));
  }
  s.clients.apply({completed});
  Status touched = s.clients.touch(client, now);
  (void)touched;  // the client exists: it was identified by its token
  // The round may be due (filled here, or among the replicas), and the client is free for
  // another job's round.
  if (filled) s.replication->wake();
  s.driver.wake();
  return accepted;
}

Result<UpdateAccepted> Coordinator::report_ready(ClientId client, JobId job_id,
                                                 RoundIndex round_index,
                                                 const Result<json>& meta_json) {
  State& s = *state_;
  auto found = s.find_job(job_id);
  if (!found.ok()) return found.status();
  JobEntry& job = **found;
  if (!job.config.secure_aggregation || !job.config.asynchronous()) {
    return conflict("job " + std::to_string(job_id) +
                    " does not sum its updates in ready cohorts (an asynchronous job with "
                    "secure aggregation does)");
  }
  auto meta = meta_json.ok() ? protocol::read_update_meta(*meta_json)
                             : Result<protocol::UpdateMeta>(meta_json.status());
  const double now = s.clock();
  auto reported = s.jobs.update(job, [&](JobStatus& status) -> Result<UpdateAccepted> {
    if (!status.round) {
      if (between_buffers(job, status)) {
        return unavailable("job " + std::to_string(job_id) +
                           " is committing a model version; retry shortly");
      }
      return conflict(round_name(job_id, round_index) + " is not open for updates");
    }
    rounds::Round& r = *status.round;
    FEDCASE_RETURN_IF_ERROR(r.check_task_round(client, round_index));
    const scheduling::ClientTask* task = r.task_for(client);
    if (task == nullptr) return r.check_admission(client, now);  // not invited, or dropped
    if (!meta.ok()) return meta.status();
    FEDCASE_RETURN_IF_ERROR(rounds::check_samples(*meta, rounds::samples_allowed(*task)));
    FEDCASE_RETURN_IF_ERROR(r.report_ready(client, now));
    return UpdateAccepted{r.index(), r.ready().size()};
  });
  if (reported.ok()) s.driver.wake();
  return reported;
}

Result<std::shared_ptr<SecureStages>> Coordinator::secure_round(JobId job_id, RoundIndex round) {
  State& s = *state_;
  auto job = s.find_job(job_id);
  if (!job.ok()) return job.status();
  if (!(*job)->config.secure_aggregation) {
    return conflict("job " + std::to_string(job_id) + " does not use secure aggregation");
  }
  std::shared_ptr<SecureStages> secure = s.secure.stages(job_id);
  if (secure && secure->index() == round) return secure;
  if (s.jobs.read(**job, [&](const JobStatus& status) { return s.may_be_behind(status, round); })) {
    return s.not_followed_yet(round_name(job_id, round));
  }
  return conflict(round_name(job_id, round) + " is not a secure round in progress");
}

uint64_t Coordinator::watch_secure_stages(ClientId client, std::function<void()> wake) {
  return state_->secure.watch(client, std::move(wake));
}

void Coordinator::unwatch_secure_stages(ClientId client, uint64_t handle) {
  state_->secure.unwatch(client, handle);
}

}  // namespace fedcase::server
