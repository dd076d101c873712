#include "client_sdk/secure_task.h"

#include <chrono>

#include "common/json_read.h"
#include "protocol/error_reply.h"
#include "protocol/secagg.h"

namespace fedcase::client {
namespace {

using nlohmann::json;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The coordinator's refusal as a Status (its message when it sent one).
Status refused(const std::string& what, const HttpResponse& r) {
  auto parsed = parse_untrusted_json(r.body);
  auto error = parsed.ok() ? protocol::read_error_reply(*parsed)
                           : Result<protocol::ErrorReply>(parsed.status());
  return unavailable(
      what + " refused: " + (error.ok() ? error->message : "HTTP " + std::to_string(r.status)));
}

// A message of the coordinator read with `read`.
template <class T>
Result<T> read_text(const std::string& body, Result<T> (*read)(const json&)) {
  auto parsed = parse_untrusted_json(body);
  if (!parsed.ok()) return parsed.status();
  return read(*parsed);
}

}  // namespace

SecureTask::SecureTask(const protocol::TaskOffer& task, ClientId self,
                       const secagg::Bytes32& signing_key, Call call, double poll_wait_s,
                       double request_timeout_s, const std::atomic<bool>& stop)
    : task_(task),
      urls_(*task.secure_aggregation),
      call_(std::move(call)),
      poll_wait_s_(poll_wait_s),
      request_timeout_s_(request_timeout_s),
      stop_(stop),
      client_(task.job, task.round, self, signing_key) {}

Result<std::string> SecureTask::wait_for(const std::string& url, double until) {
  while (!stop_) {
    const double wait = std::min(poll_wait_s_, std::max(0.0, until - unix_now()));
    auto r = call_("GET", url + "?wait=" + std::to_string(wait), "", {}, wait + request_timeout_s_);
    if (!r.ok()) return r.status();
    if (r->status == 200) return std::move(r->body);
    if (r->status != 204) return refused("the stage's message", *r);
    if (unix_now() >= until) break;
  }
  return unavailable("the stage did not end in time");
}

Status SecureTask::post(const std::string& url, const std::string& body) {
  auto r = call_("POST", url, body, {{"Content-Type", "application/json"}}, request_timeout_s_);
  if (!r.ok()) return r.status();
  if (r->status != 200) return refused("the stage's message", *r);
  return ok_status();
}

Status SecureTask::share_keys() {
  auto keys = client_.advertise_keys();
  if (!keys.ok()) return keys.status();
  FEDCASE_RETURN_IF_ERROR(
      post(urls_.keys_url, protocol::write_secagg_advertise_keys(*keys).dump()));
  auto reply = wait_for(urls_.keys_url, task_.deadline);
  if (!reply.ok()) return reply.status();
  auto round = read_text(*reply, protocol::read_secagg_keys);
  if (!round.ok()) return round.status();
  auto shares = client_.share_keys(round->graph, round->key_list);
  if (!shares.ok()) return shares.status();
  return post(urls_.shares_url, protocol::write_secagg_shares(*shares).dump());
}

Result<SecureTask::MaskedInput> SecureTask::mask(const std::vector<float>& delta, uint64_t weight) {
  auto reply = wait_for(urls_.shares_url, task_.deadline);
  if (!reply.ok()) return reply.status();
  auto forwarded = read_text(*reply, protocol::read_secagg_forwarded_shares);
  if (!forwarded.ok()) return forwarded.status();
  auto masked = client_.mask_input(*forwarded, delta.data(), delta.size(), weight,
                                   urls_.staleness_factor.value_or(1.0));
  if (!masked.ok()) return unavailable("cannot mask the update: " + masked.status().message());
  return MaskedInput{std::move(masked->body),
                     protocol::write_secagg_masked_input(masked->header).dump()};
}

Status SecureTask::unmask() {
  // The unmask stage opens at the latest at the deadline and lasts stage_seconds.
  auto reply =
      wait_for(urls_.unmask_url, task_.deadline + urls_.stage_seconds + request_timeout_s_);
  if (!reply.ok()) return reply.status();
  auto request = read_text(*reply, protocol::read_secagg_unmask_request);
  if (!request.ok()) return request.status();
  auto response = client_.unmask(*request);
  if (!response.ok()) return response.status();
  return post(urls_.unmask_url, protocol::write_secagg_unmask_response(*response).dump());
}

}  // namespace fedcase::client
