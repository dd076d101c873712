#include "server/core/secure/secure_round.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/crash_point.h"
#include "secagg/crypto.h"

namespace fedcase::server {
namespace {

using nlohmann::json;
using Stage = SecureRound::Stage;

// The clients of `from` that are not in `answered`.
size_t missing(const std::set<ClientId>& from, const std::set<ClientId>& answered) {
  size_t n = 0;
  for (ClientId c : from) n += answered.count(c) == 0;
  return n;
}

// Each client's message of the next stage: `build(client)` gives it, `write` writes it. The
// first error stops the writing and is left in `closed` (which must be OK to begin with).
template <class Message, class Build>
std::map<ClientId, std::string> write_each(const std::set<ClientId>& clients, Status& closed,
                                           Build build, json (*write)(const Message&)) {
  std::map<ClientId, std::string> written;
  for (ClientId c : clients) {
    if (!closed.ok()) break;
    Result<Message> message = build(c);
    if (!message.ok()) {
      closed = message.status();
      break;
    }
    written[c] = write(*message).dump();
  }
  return written;
}

}  // namespace

SecureRound::SecureRound(const Setup& setup, TaskNotifier& notifier,
                         std::function<void()> wake_driver, Metrics& metrics)
    : job_(setup.job),
      round_(setup.round),
      invitees_(setup.invitees),
      config_(setup.config),
      notifier_(notifier),
      wake_driver_(std::move(wake_driver)),
      metrics_(metrics),
      share_messages_(setup.share_messages),
      record_keys_(setup.record_keys),
      inputs_ready_(setup.inputs_ready) {}

std::shared_ptr<SecureRound> SecureRound::open(Setup setup, TaskNotifier& notifier,
                                               std::function<void()> wake_driver,
                                               Metrics& metrics) {
  std::shared_ptr<SecureRound> made(
      new SecureRound(setup, notifier, std::move(wake_driver), metrics));
  SecureRound* round = made.get();
  MutexLock lock(round->mu_);
  round->stage_started_ = setup.opened_at;
  round->deadline_ = setup.opened_at + setup.config.stage_seconds;
  Result<protocol::SecAggParams> params =
      secagg::round_params(setup.config, setup.invitees.size(), setup.vector_length);
  Result<secagg::Bytes32> seed = secagg::random_seed();
  Status ready = !params.ok() ? params.status() : seed.status();
  if (ready.ok()) {
    secagg::SecAggRoundSetup s;
    s.job = setup.job;
    s.round = setup.round;
    s.params = *params;
    s.invitees = setup.invitees;
    s.graph_seed = *seed;
    s.used_public_keys = std::move(setup.used_public_keys);
    s.signing_keys = std::move(setup.signing_keys);
    s.threads = setup.threads;
    auto server = secagg::SecAggServer::create(std::move(s));
    if (server.ok()) {
      round->server_ = std::move(server).value();
      round->params_ = *params;
    }
    ready = server.status();
  }
  if (!ready.ok()) {
    round->fail("secure aggregation cannot start: " + ready.message(), setup.opened_at);
  }
  return made;
}

SecureRound::Stage SecureRound::stage() const {
  MutexLock lock(mu_);
  return stage_;
}

std::string SecureRound::failure() const {
  MutexLock lock(mu_);
  return failure_;
}

const char* SecureRound::stage_label() const {
  return unmasking_ ? "unmasking" : secagg::stage_name(stage_);
}

void SecureRound::enter(Stage next, double now) {
  const char* closing = stage_label();
  const double seconds = std::max(0.0, now - stage_started_);
  stage_seconds_[closing] = seconds;
  metrics_.observe(metric::kSecAggStageSeconds, {{"stage", closing}}, seconds);
  stage_ = next;
  unmasking_ = false;
  stage_started_ = now;
}

void SecureRound::fail(const std::string& why, double now) {
  if (stage_ == Stage::kFailed || stage_ == Stage::kDone) return;
  failed_in_ = secagg::stage_name(stage_);
  failure_ = why;
  enter(Stage::kFailed, now);
}

Status SecureRound::check_stage(Stage stage) const {
  if (stage_ == Stage::kFailed) return conflict(failure_);
  const std::string where = "round " + std::to_string(round_) + " of job " + std::to_string(job_);
  if (unmasking_) return conflict(where + " is removing its masks");
  if (stage_ == stage) return ok_status();
  // A client whose stage message another replica served first (the stage's messages reach
  // every replica before this one opens the stage) is a moment early here.
  if (stage_ < stage) {
    return unavailable(where + " is opening its " + secagg::stage_name(stage) +
                       " stage; retry shortly");
  }
  return conflict(where + " is in its " + secagg::stage_name(stage_) + " stage, not " +
                  secagg::stage_name(stage));
}

Status SecureRound::call_in_stage(Stage stage, const std::function<Status()>& call,
                                  const std::function<bool()>& note) {
  {
    MutexLock lock(mu_);
    FEDCASE_RETURN_IF_ERROR(check_stage(stage));
    ++calls_in_flight_;
  }
  Status status = call();
  bool complete = false;
  {
    // The answer is noted before the call leaves: a stage closes only once none is in flight.
    MutexLock lock(mu_);
    if (status.ok()) complete = note();
    if (--calls_in_flight_ == 0) calls_left_.notify_all();
  }
  if (complete) wake_driver_();
  return status;
}

Status SecureRound::receive_keys(ClientId client, const protocol::SecAggAdvertiseKeys& m) {
  return call_in_stage(
      Stage::kAdvertiseKeys, [&] { return server_->receive_keys(client, m); },
      [&]() FEDCASE_REQUIRES(mu_) {
        advertised_.insert(client);
        return advertised_.size() == invitees_.size();
      });
}

Status SecureRound::receive_shares(ClientId client, const protocol::SecAggShares& m) {
  return call_in_stage(
      Stage::kShareKeys, [&] { return server_->receive_shares(client, m); },
      [&]() FEDCASE_REQUIRES(mu_) {
        shared_.insert(client);
        return shared_.size() == participants_.size();
      });
}

Status SecureRound::receive_masked_input(ClientId client, const protocol::SecAggMaskedInput& h,
                                         std::string_view body,
                                         const std::function<Status()>& record) {
  MutexLock one_at_a_time(inputs_mu_);
  return call_in_stage(
      Stage::kMaskedInput,
      [&]() -> Status {
        FEDCASE_RETURN_IF_ERROR(server_->check_masked_input(client, h, body.size()));
        FEDCASE_RETURN_IF_ERROR(record());
        return server_->receive_masked_input(client, h, body);
      },
      [&]() FEDCASE_REQUIRES(mu_) {
        inputs_.insert(client);
        return inputs_.size() == sharers_.size();
      });
}

Status SecureRound::receive_unmask_response(ClientId client,
                                            const protocol::SecAggUnmaskResponse& m) {
  return call_in_stage(
      Stage::kUnmask, [&] { return server_->receive_unmask_response(client, m); },
      [&]() FEDCASE_REQUIRES(mu_) {
        answered_.insert(client);
        return answered_.size() == survivors_.size();
      });
}

Status SecureRound::receive_relayed(const std::string& kind, ClientId client,
                                    const std::string& body) {
  {
    MutexLock lock(mu_);
    if (relayed_.count({kind, client})) return ok_status();
  }
  const json message = json::parse(body, nullptr, false);
  if (message.is_discarded()) return invalid_argument("a relayed message is not JSON");
  Status taken;
  if (kind == stage_kind::kKeys) {
    auto keys = protocol::read_secagg_advertise_keys(message);
    taken = keys.ok() ? receive_keys(client, *keys) : keys.status();
  } else if (kind == stage_kind::kShares) {
    auto shares = protocol::read_secagg_shares(message);
    taken = shares.ok() ? receive_shares(client, *shares) : shares.status();
  } else if (kind == stage_kind::kUnmask) {
    auto answer = protocol::read_secagg_unmask_response(message);
    taken = answer.ok() ? receive_unmask_response(client, *answer) : answer.status();
  } else {
    return invalid_argument("no stage takes relayed '" + kind + "' messages");
  }
  // Taken or refused, it is not read again; out of stage (it may have come a moment before the
  // stage opened here) it is read again.
  if (taken.code() != Code::kConflict && taken.code() != Code::kUnavailable) {
    MutexLock lock(mu_);
    relayed_.insert({kind, client});
  }
  return taken;
}

Status SecureRound::merge_partial(const std::string& replica, std::string_view bytes) {
  // Between a client's input checks and its fold (receive_masked_input) no merge may take the
  // room to hold it.
  MutexLock one_at_a_time(inputs_mu_);
  return call_in_stage(
      Stage::kMaskedInput,
      [&]() -> Status {
        auto senders = server_->merge_masked_partial(bytes);
        if (!senders.ok()) return senders.status();
        MutexLock lock(mu_);
        inputs_.insert(senders->begin(), senders->end());
        merged_.insert(replica);
        return ok_status();
      },
      [] { return false; });
}

std::set<std::string> SecureRound::merged_replicas() const {
  MutexLock lock(mu_);
  return merged_;
}

size_t SecureRound::sharer_count() const {
  MutexLock lock(mu_);
  return sharers_.size();
}

Result<std::optional<std::string>> SecureRound::written_message(
    Stage ready, const std::map<ClientId, std::string>& written, ClientId client,
    const char* missing_stage) const {
  if (stage_ == Stage::kFailed) return conflict(failure_);
  if (stage_ < ready) return std::optional<std::string>();
  auto it = written.find(client);
  if (it == written.end()) {
    return permission_denied("client " + std::to_string(client) + " did not " + missing_stage +
                             " in round " + std::to_string(round_) + " of job " +
                             std::to_string(job_));
  }
  return std::optional<std::string>(it->second);
}

Result<std::optional<std::string>> SecureRound::keys_reply(ClientId client) const {
  MutexLock lock(mu_);
  return written_message(Stage::kShareKeys, keys_replies_, client, "advertise its keys in time");
}

Result<std::optional<std::string>> SecureRound::forwarded_shares(ClientId client) const {
  MutexLock lock(mu_);
  return written_message(Stage::kMaskedInput, forwarded_, client, "share its keys in time");
}

Result<std::optional<std::string>> SecureRound::unmask_request(ClientId client) const {
  MutexLock lock(mu_);
  return written_message(Stage::kUnmask, unmask_requests_, client, "send its masked input");
}

std::optional<double> SecureRound::next_deadline(double now) const {
  MutexLock lock(mu_);
  const bool timed = !unmasking_ && (stage_ == Stage::kAdvertiseKeys ||
                                     stage_ == Stage::kShareKeys || stage_ == Stage::kUnmask ||
                                     (inputs_ready_ && stage_ == Stage::kMaskedInput));
  if (!timed || deadline_ <= now) return std::nullopt;
  return deadline_;
}

Status SecureRound::publish(Stage next, std::map<ClientId, std::string> written, Status closed,
                            double now) {
  // The other replicas have the stage's messages before any client does: a client whose next
  // request reaches another replica finds its stage there.
  if (closed.ok() && share_messages_) {
    Status sent = share_messages_(secagg::opening_kind(next), written);
    if (!sent.ok()) {
      closed = unavailable("the " + std::string(secagg::stage_name(next)) +
                           " stage's messages cannot reach the other replicas: " + sent.message());
    } else {
      crash_point("stage_shared");
    }
  }
  {
    MutexLock lock(mu_);
    if (!closed.ok()) {
      fail(closed.message(), now);
    } else {
      enter(next, now);
      deadline_ = now + config_.stage_seconds;
      if (next == Stage::kShareKeys) keys_replies_ = std::move(written);
      if (next == Stage::kMaskedInput) forwarded_ = std::move(written);
      if (next == Stage::kUnmask) unmask_requests_ = std::move(written);
    }
  }
  notifier_.notify(invitees_);
  return closed;
}

Status SecureRound::close_keys(double now) {
  // No call reaches the server in a closed stage: calls in flight finish first.
  wait_for_calls();
  std::map<ClientId, std::string> written;
  Status closed = server_->close_keys();
  if (closed.ok() && record_keys_) {
    if (Status kept = record_keys_(server_->public_keys()); !kept.ok()) {
      closed = unavailable("the round's public keys cannot be kept for the later rounds: " +
                           kept.message());
    }
  }
  Result<protocol::SecAggGraph> graph =
      closed.ok() ? server_->graph() : Result<protocol::SecAggGraph>(closed);
  if (graph.ok()) {
    // The graph is the same for every participant: written once, spliced into each answer.
    const std::string graph_json = protocol::write_secagg_graph(*graph).dump();
    for (ClientId c : graph->participants) {
      Result<protocol::SecAggKeyList> list = server_->key_list(c);
      if (!list.ok()) {
        closed = list.status();
        break;
      }
      written[c] =
          protocol::splice_secagg_keys(graph_json, protocol::write_secagg_key_list(*list).dump());
    }
    MutexLock lock(mu_);
    participants_ = std::set<ClientId>(graph->participants.begin(), graph->participants.end());
  } else {
    closed = graph.status();
  }
  return publish(Stage::kShareKeys, std::move(written), closed, now);
}

Status SecureRound::close_shares(double now) {
  wait_for_calls();
  Status closed = server_->close_shares();
  std::set<ClientId> sharers;
  {
    MutexLock lock(mu_);
    sharers = shared_;
  }
  std::map<ClientId, std::string> written = write_each(
      sharers, closed, [&](ClientId c) { return server_->forwarded_shares(c); },
      protocol::write_secagg_forwarded_shares);
  {
    MutexLock lock(mu_);
    sharers_ = std::move(sharers);
  }
  return publish(Stage::kMaskedInput, std::move(written), closed, now);
}

void SecureRound::wait_for_calls() {
  MutexLock lock(mu_);
  while (calls_in_flight_ > 0) calls_left_.wait(mu_);
}

bool SecureRound::stage_due(double now) const {
  MutexLock lock(mu_);
  if (stage_ == Stage::kAdvertiseKeys) {
    return now >= deadline_ || advertised_.size() == invitees_.size();
  }
  if (stage_ == Stage::kShareKeys)
    return now >= deadline_ || shared_.size() == participants_.size();
  return false;
}

Status SecureRound::close_stage(double now) {
  Stage stage;
  {
    MutexLock lock(mu_);
    stage = stage_;
  }
  if (stage == Stage::kAdvertiseKeys) return close_keys(now);
  if (stage == Stage::kShareKeys) return close_shares(now);
  return conflict(std::string("no key stage is open: the round is in its ") +
                  secagg::stage_name(stage) + " stage");
}

bool SecureRound::inputs_due(double now) const {
  MutexLock lock(mu_);
  return stage_ == Stage::kMaskedInput &&
         (inputs_.size() == sharers_.size() || (inputs_ready_ && now >= deadline_));
}

Status SecureRound::close_inputs(double now) {
  {
    MutexLock lock(mu_);
    FEDCASE_RETURN_IF_ERROR(check_stage(Stage::kMaskedInput));
  }
  wait_for_calls();
  Status closed = server_->close_masked_inputs();
  // The clients whose input is in the sum: those that sent one, but the ones a refusal
  // conflict left out.
  std::set<ClientId> survivors = server_->survivors();
  std::map<ClientId, std::string> written = write_each(
      survivors, closed, [&](ClientId c) { return server_->unmask_request(c); },
      protocol::write_secagg_unmask_request);
  if (closed.ok()) {  // a failed close decided no sum: nobody survived or dropped from it
    MutexLock lock(mu_);
    survivors_ = std::move(survivors);
    left_out_ = server_->left_out();
    for (ClientId c : sharers_) {
      if (survivors_.count(c) == 0) dropped_.push_back(c);
    }
  }
  return publish(Stage::kUnmask, std::move(written), closed, now);
}

bool SecureRound::unmask_due(double now) const {
  MutexLock lock(mu_);
  return stage_ == Stage::kUnmask && !unmasking_ &&
         (now >= deadline_ || answered_.size() == survivors_.size());
}

Result<secagg::SecAggSum> SecureRound::finish(double now) {
  {
    // Decide: no message reaches the server from here on, and those in flight have left.
    MutexLock lock(mu_);
    FEDCASE_RETURN_IF_ERROR(check_stage(Stage::kUnmask));
    enter(Stage::kUnmask, now);  // records the unmask stage's seconds
    unmasking_ = true;
    while (calls_in_flight_ > 0) calls_left_.wait(mu_);
  }
  // Compute: the unmasking, with no lock a request needs.
  const auto start = std::chrono::steady_clock::now();
  Result<secagg::SecAggSum> sum = server_->finish();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Publish.
  MutexLock lock(mu_);
  stage_seconds_["unmasking"] = seconds;
  metrics_.observe(metric::kSecAggStageSeconds, {{"stage", "unmasking"}}, seconds);
  unmasking_ = false;
  if (!sum.ok()) {
    failed_in_ = secagg::stage_name(Stage::kUnmask);
    failure_ = sum.status().message();
    stage_ = Stage::kFailed;
    return conflict(failure_);
  }
  stage_ = Stage::kDone;
  wrong_shares_ = sum->wrong_shares;
  return sum;
}

void SecureRound::abort(const std::string& why, double now) {
  {
    MutexLock lock(mu_);
    fail(why, now);
  }
  notifier_.notify(invitees_);
}

json SecureRound::summary() const {
  MutexLock lock(mu_);
  json out = json::object();
  if (params_) {
    out = {{"degree", params_->degree}, {"threshold", params_->threshold},
           {"bits", params_->bits},     {"clip", params_->clip},
           {"scale", params_->scale},   {"max_weight", params_->max_weight}};
  }
  const std::set<ClientId> invited(invitees_.begin(), invitees_.end());
  out["stage"] = stage_label();
  out["clients"] = {{"invited", invitees_.size()},
                    {"advertised", advertised_.size()},
                    {"shared", shared_.size()},
                    {"masked_input", inputs_.size()},
                    {"answered", answered_.size()}};
  out["dropouts"] = {{"advertise_keys", missing(invited, advertised_)},
                     {"share_keys", missing(participants_, shared_)},
                     {"masked_input", missing(sharers_, inputs_)},
                     {"unmask", missing(survivors_, answered_)}};
  out["unmasked_dropped"] = dropped_;
  out["left_out"] = left_out_;
  out["wrong_shares"] = wrong_shares_;
  out["stage_seconds"] = stage_seconds_;
  if (!failure_.empty()) {
    out["failed_in"] = failed_in_;
    out["failure"] = failure_;
  }
  return out;
}

std::set<std::string> SecureRound::public_keys() const {
  return server_ ? server_->public_keys() : std::set<std::string>();
}

std::vector<uint64_t> SecureRound::masked_sum() const {
  return server_ ? server_->masked_sum() : std::vector<uint64_t>();
}

}  // namespace fedcase::server
