#include "server/api/api.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "common/crypto.h"
#include "common/json_read.h"
#include "common/log.h"
#include "protocol/check_in.h"
#include "protocol/error_reply.h"
#include "protocol/secagg.h"
#include "protocol/upload_session.h"
#include "server/api/byte_range.h"
#include "server/api/client_query.h"
#include "server/api/dashboard.h"
#include "server/api/views.h"
#include "server/transport/multipart.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

constexpr const char* kMetaHeader = "X-Fedcase-Meta";
constexpr const char* kSecAggHeader = "X-Fedcase-SecAgg";

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (end > start) parts.emplace_back(path.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A query string's component with %XX and '+' decoded; a malformed escape is kept as it is.
std::string percent_decoded(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int hi = text[i] == '%' && i + 2 < text.size() ? hex_value(text[i + 1]) : -1;
    const int lo = hi >= 0 ? hex_value(text[i + 2]) : -1;
    if (lo >= 0) {
      out += char(hi * 16 + lo);
      i += 2;
    } else {
      out += text[i] == '+' ? ' ' : text[i];
    }
  }
  return out;
}

// Every parameter of the query string `query`, decoded; a repeated key keeps its last value.
std::map<std::string, std::string> query_params(std::string_view query) {
  std::map<std::string, std::string> params;
  size_t start = 0;
  while (start < query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    std::string_view item = query.substr(start, end - start);
    const size_t eq = item.find('=');
    if (!item.empty()) {
      params[percent_decoded(item.substr(0, eq))] =
          eq == std::string_view::npos ? std::string() : percent_decoded(item.substr(eq + 1));
    }
    start = end + 1;
  }
  return params;
}

// Parses a decimal id; nullopt unless the whole string is digits and fits.
std::optional<uint64_t> parse_id(const std::string& s) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoull(s);
}

// Text that came from the caller (a URL segment, a tensor name) may hold invalid UTF-8: it is
// replaced, never a reason to fail the answer.
std::string dump_answer(const json& body) {
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A reply that is sent as it is (not a long poll).
Reply answer(Response response) {
  Reply reply;
  reply.response = std::move(response);
  return reply;
}

Response json_response(http::status status, const json& body, const Request& req) {
  Response res{status, req.version()};
  res.set(http::field::content_type, "application/json");
  res.keep_alive(req.keep_alive());
  res.body() = dump_answer(body);
  res.prepare_payload();
  return res;
}

// The detail of an error (a database's text, a lease holder's name) goes to the log only, never
// to the caller: at most one line a second, so that an outage under load does not flood it.
void log_detail(const Status& status, const Request& req) {
  if (status.detail().empty()) return;
  static std::atomic<int64_t> last_second{0};
  static std::atomic<uint64_t> unlogged{0};
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = last_second.load();
  if (now == last || !last_second.compare_exchange_strong(last, now)) {
    unlogged += 1;
    return;
  }
  const std::string target(req.target());
  const uint64_t more = unlogged.exchange(0);
  log_warn(std::string(req.method_string()) + " " +
           target.substr(0, target.find('?')) + ": " + status.to_string() +
           (more > 0 ? " (and " + std::to_string(more) + " more such errors unlogged)" : ""));
}

Reply error_reply(const Status& status, const Request& req) {
  log_detail(status, req);
  return answer(error_response(status, req.version(), req.keep_alive()));
}

// The JSON `view` of a successful `result`, or its error.
template <class T, class View>
Reply result_reply(const Result<T>& result, View view, const Request& req,
                   http::status ok = http::status::ok) {
  if (!result.ok()) return error_reply(result.status(), req);
  return answer(json_response(ok, view(*result), req));
}

Reply json_reply(const json& body, const Request& req) {
  return answer(json_response(http::status::ok, body, req));
}

Result<json> parse_json_body(const Request& req) {
  if (req.body().empty()) return json::object();
  auto j = parse_untrusted_json(req.body());
  if (!j.ok()) return invalid_argument("request body: " + j.status().message());
  return j;
}

// A job creation's config and model file: the JSON body, or the multipart parts "config" and
// "model" (a view into the request's body).
struct JobSubmission {
  json config;
  std::optional<std::string_view> model_file;
};

bool is_multipart(const http::request_header<>& req) {
  auto type = req.find(http::field::content_type);
  return type != req.end() &&
         is_multipart_form_data(std::string_view(type->value().data(), type->value().size()));
}

Result<JobSubmission> parse_job_submission(const Request& req) {
  if (!is_multipart(req)) {
    auto body = parse_json_body(req);
    if (!body.ok()) return body.status();
    return JobSubmission{std::move(body).value(), std::nullopt};
  }
  const auto type = req[http::field::content_type];
  auto boundary = multipart_boundary(std::string_view(type.data(), type.size()));
  if (!boundary.ok()) return boundary.status();
  auto parts = parse_multipart(req.body(), *boundary);
  if (!parts.ok()) return parts.status();
  std::optional<std::string_view> config, model;
  for (const MultipartPart& part : *parts) {
    std::optional<std::string_view>* slot = part.name == "config"  ? &config
                                            : part.name == "model" ? &model
                                                                   : nullptr;
    if (slot == nullptr) {
      return invalid_argument("unknown multipart part '" + part.name +
                              "': a job takes \"config\" and \"model\"");
    }
    if (*slot) return invalid_argument("multipart part '" + part.name + "' appears twice");
    *slot = part.body;
  }
  if (!config) return invalid_argument("multipart job creation needs a \"config\" part");
  auto parsed = parse_untrusted_json(*config);
  if (!parsed.ok()) return invalid_argument("config part: " + parsed.status().message());
  return JobSubmission{std::move(parsed).value(), model};
}

// The value of header `field` of `req`, or nullopt.
std::optional<std::string_view> header_value(const Request& req, http::field field) {
  auto it = req.find(field);
  if (it == req.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

// An immutable body shared by every download (a model, a module), with its checksum as a
// strong ETag "<checksum>": 304 when the caller's If-None-Match names it; one byte range of it
// (206) when the caller asks with Range, and with If-Range naming the ETag when it gives one
// (a resumed download of the same bytes); 416 for a range past its end.
Reply immutable_reply(const Request& req, const std::string& checksum,
                      std::shared_ptr<const std::string> body) {
  const std::string etag = "\"" + checksum + "\"";
  if (header_value(req, http::field::if_none_match) == std::optional<std::string_view>(etag)) {
    Response res{http::status::not_modified, req.version()};
    res.set(http::field::etag, etag);
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    return answer(std::move(res));
  }
  const std::optional<std::string_view> if_range = header_value(req, http::field::if_range);
  const RangeAsked asked =
      !if_range || *if_range == etag
          ? read_range(header_value(req, http::field::range), body->size())
          : RangeAsked();
  const std::string size = std::to_string(body->size());
  if (asked.kind == RangeAsked::Kind::kUnsatisfiable) {
    Response res = error_response(
        {Code::kInvalidArgument, "the range starts past the body's " + size + " bytes"},
        req.version(), req.keep_alive());
    res.result(http::status::range_not_satisfiable);
    res.set(http::field::content_range, "bytes */" + size);
    return answer(std::move(res));
  }
  const bool ranged = asked.kind == RangeAsked::Kind::kRange;
  Response res{ranged ? http::status::partial_content : http::status::ok, req.version()};
  res.set(http::field::content_type, "application/octet-stream");
  res.set(http::field::etag, etag);
  res.set(http::field::accept_ranges, "bytes");
  res.set(http::field::cache_control, "public, max-age=31536000, immutable");
  if (ranged) {
    res.set(http::field::content_range, "bytes " + std::to_string(asked.range.first) + "-" +
                                            std::to_string(asked.range.last) + "/" + size);
  }
  res.keep_alive(req.keep_alive());
  Reply reply = answer(std::move(res));
  reply.shared_body = std::move(body);
  if (ranged) {
    reply.shared_offset = asked.range.first;
    reply.shared_length = asked.range.length();
  }
  return reply;
}

std::string_view bearer_token(const http::request_header<>& req) {
  auto it = req.find(http::field::authorization);
  if (it == req.end()) return {};
  std::string_view value(it->value().data(), it->value().size());
  constexpr std::string_view kPrefix = "Bearer ";
  if (value.substr(0, kPrefix.size()) != kPrefix) return {};
  return value.substr(kPrefix.size());
}

// `response` with Retry-After: the seconds, rounded up, at least 1.
Response with_retry_after(Response response, double seconds) {
  response.set(http::field::retry_after, std::to_string(std::max(1, int(std::ceil(seconds)))));
  return response;
}

// 429 with the seconds until the next request is allowed.
Response too_many_requests(double retry_after, const Request& header) {
  return with_retry_after(error_response(resource_exhausted("too many requests"), header.version(),
                                         header.keep_alive()),
                          retry_after);
}

// ---- the routes' handlers: one request each, authenticated and of the right role ----

// What a handler gets: the request, who sent it, the ids of its path ({job}, {round},
// {version}, in order), its words ([version], in order) and its JSON body (for Body::kJson
// routes).
struct Call {
  const Request& request;
  const Caller& caller;
  std::vector<uint64_t> ids;
  std::vector<std::string> words;
  json body;
  std::string_view query;
  const RequestContext& context;

  // A tenant sees only its own jobs; the admin and clients see every job.
  Scope scope() const { return caller.role == Role::kTenant ? Scope(caller.tenant) : Scope(); }
  std::optional<ClientId> client() const {
    return caller.role == Role::kClient ? std::optional<ClientId>(caller.client) : std::nullopt;
  }
};

Reply metrics_page(Coordinator& coordinator, const Call& call) {
  Response res{http::status::ok, call.request.version()};
  res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res.keep_alive(call.request.keep_alive());
  res.body() = coordinator.metrics().render();
  res.prepare_payload();
  return answer(std::move(res));
}

Reply list_jobs(Coordinator& coordinator, const Call& call) {
  return json_reply(jobs_json(coordinator.list_jobs(call.scope())), call.request);
}

Reply create_job(Coordinator& coordinator, const Call& call) {
  const Request& req = call.request;
  auto submission = parse_job_submission(req);
  if (!submission.ok()) return error_reply(submission.status(), req);
  const TenantId owner = call.caller.role == Role::kTenant ? call.caller.tenant : 0;
  double retry_after = 0;
  auto created =
      coordinator.create_job(submission->config, owner, retry_after, submission->model_file);
  if (!created.ok() && created.status().code() == Code::kResourceExhausted) {
    return answer(with_retry_after(
        error_response(created.status(), req.version(), req.keep_alive()), retry_after));
  }
  return result_reply(created, job_summary_json, req, http::status::created);
}

Reply job_detail(Coordinator& coordinator, const Call& call) {
  return result_reply(coordinator.job_detail(call.ids[0], call.scope()), job_detail_json,
                      call.request);
}

template <const char* kAction>
Reply control_job(Coordinator& coordinator, const Call& call) {
  const JobId job = call.ids[0];
  return result_reply(
      coordinator.control_job(job, kAction, call.scope()),
      [job](JobState state) { return job_state_json(job, state); }, call.request);
}
constexpr char kPause[] = "pause";
constexpr char kResume[] = "resume";
constexpr char kCancel[] = "cancel";

Reply list_clients(Coordinator& coordinator, const Call& call) {
  auto listing = parse_client_query(query_params(call.query));
  if (!listing.ok()) return error_reply(listing.status(), call.request);
  const std::vector<ClientSummary> clients = coordinator.list_clients();
  return json_reply(clients_json(select_clients(clients, *listing)), call.request);
}

Reply list_tenants(Coordinator& coordinator, const Call& call) {
  return json_reply(tenants_json(coordinator.tenants()), call.request);
}

Reply create_tenant(Coordinator& coordinator, const Call& call) {
  return result_reply(coordinator.create_tenant(call.body), tenant_created_json, call.request,
                      http::status::created);
}

Reply register_client(Coordinator& coordinator, const Call& call) {
  return result_reply(coordinator.register_client(call.body), registration_json, call.request,
                      http::status::created);
}

Reply heartbeat(Coordinator& coordinator, const Call& call) {
  Status beat = coordinator.heartbeat(call.caller.client, call.body);
  if (!beat.ok()) return error_reply(beat, call.request);
  return json_reply({{"ok", true}}, call.request);
}

// What a long poll asks once at its start and again at each wake-up (on an I/O thread): the
// answer (from the original request's `head`), or nullopt while there is none. May throw.
using PollAnswer = std::function<std::optional<Response>(const Request& head)>;
// What a long poll that asked to wait `wait_s` seconds (within long_poll_max_s) answers when
// it ends with nothing: after that wait, or at once when it was not held (on an I/O thread).
// May throw.
using EmptyAnswer = std::function<Response(const Request& head, double wait_s)>;

// 204 No Content.
Response no_content(const Request& head) {
  Response empty{http::status::no_content, head.version()};
  empty.keep_alive(head.keep_alive());
  empty.prepare_payload();
  return empty;
}

// A long poll: answered at once when `look` has an answer, else when `watch` wakes it and
// `look` has one, or with `empty` (no_content when not given) when `wait=S` seconds pass (at
// most long_poll_max_s; at once when `hold` is false: nothing could come).
Reply long_poll(Coordinator& coordinator, const Call& call, PollAnswer look,
                std::function<uint64_t(std::function<void()>)> watch,
                std::function<void(uint64_t)> unwatch, EmptyAnswer empty = {}, bool hold = true) {
  const Request& req = call.request;
  double wait = 0;
  const auto params = query_params(call.query);
  if (auto w = params.find("wait"); w != params.end()) {
    char* end = nullptr;
    wait = std::strtod(w->second.c_str(), &end);
    if (w->second.empty() || *end != '\0' || !std::isfinite(wait) || wait < 0) {
      return error_reply(invalid_argument("wait must be a number of seconds >= 0"), req);
    }
    wait = std::min(wait, coordinator.config().long_poll_max_s);
  }
  const double asked = wait;
  if (!hold) wait = 0;
  Request head;  // only version and keep-alive are needed to answer later
  head.version(req.version());
  head.keep_alive(req.keep_alive());
  // Run on an I/O thread, at the start of the wait, at each wake-up and at its end: nothing
  // may escape.
  auto internal = [head](const std::exception& e) {
    log_error(std::string("long poll failed: ") + e.what());
    return error_response(internal_error(std::string(kInternalErrorMessage)), head.version(),
                          head.keep_alive());
  };
  auto poll = [look = std::move(look), internal, head]() -> std::optional<Response> {
    try {
      return look(head);
    } catch (const std::exception& e) {
      return internal(e);
    }
  };
  auto nothing = [empty = std::move(empty), internal, head, asked]() -> Response {
    try {
      return empty ? empty(head, asked) : no_content(head);
    } catch (const std::exception& e) {
      return internal(e);
    }
  };
  if (auto first = poll()) return answer(std::move(*first));
  if (wait <= 0) return answer(nothing());
  Reply waiting;
  waiting.poll = poll;
  waiting.empty = nothing;
  waiting.wait_s = wait;
  waiting.watch = std::move(watch);
  waiting.unwatch = std::move(unwatch);
  return waiting;
}

// A task poll: answered as soon as a round that invites the client opens. Without one by the
// end of its wait, the client is told when to check in again (pace steering: 204 with
// Fedcase-Check-In); when no running job wants more clients checked in
// (Coordinator::wants_clients) it is told at once.
Reply next_task(Coordinator& coordinator, const Call& call) {
  const ClientId id = call.caller.client;
  return long_poll(
      coordinator, call,
      [&coordinator, id](const Request& head) -> std::optional<Response> {
        auto task = coordinator.next_task(id);
        if (!task.ok()) return error_response(task.status(), head.version(), head.keep_alive());
        if (!task->has_value()) return std::nullopt;
        return json_response(http::status::ok, task_json(**task), head);
      },
      [&coordinator, id](std::function<void()> wake) {
        return coordinator.watch_tasks(id, std::move(wake));
      },
      [&coordinator, id](uint64_t handle) { coordinator.unwatch_tasks(id, handle); },
      [&coordinator, id](const Request& head, double wait_s) {
        Response empty = no_content(head);
        auto later = coordinator.check_in_later(id, wait_s);
        if (later.ok()) {
          empty.set(std::string(protocol::kCheckInHeader), protocol::write_check_in(*later));
        }
        return empty;
      },
      coordinator.wants_clients());
}

// ---- secure aggregation's stages (docs/protocol.md, "Secure aggregation") ----

// The stage a secure-aggregation route serves, for the refusals' metric label.
template <const char* kStage>
void count_refusal(Coordinator& coordinator, const Status& why) {
  coordinator.metrics().add(metric::kSecAggMessagesRefused,
                            {{"stage", kStage}, {"reason", code_name(why.code())}});
}
constexpr char kKeysStage[] = "advertise_keys";
constexpr char kSharesStage[] = "share_keys";
constexpr char kInputStage[] = "masked_input";
constexpr char kUnmaskStage[] = "unmask";

// A client's message of a stage (a JSON body): read, then taken by its round's SecureStages
// (the owner's SecureRound, or another replica's copy that passes it on).
template <const char* kStage, class Message, Result<Message> (*kRead)(const json&),
          Status (SecureStages::*kReceive)(ClientId, const Message&)>
Reply secure_message(Coordinator& coordinator, const Call& call) {
  auto round = coordinator.secure_round(call.ids[0], call.ids[1]);
  Status taken = round.status();
  if (taken.ok()) {
    Result<Message> message = kRead(call.body);
    taken = message.ok() ? ((**round).*kReceive)(call.caller.client, *message) : message.status();
  }
  if (!taken.ok()) {
    count_refusal<kStage>(coordinator, taken);
    return error_reply(taken, call.request);
  }
  return json_reply({{"accepted", true}}, call.request);
}

// A long poll for the client's message of a stage, answered once the stage before has closed.
template <Result<std::optional<std::string>> (SecureStages::*kRead)(ClientId) const>
Reply secure_poll(Coordinator& coordinator, const Call& call) {
  auto round = coordinator.secure_round(call.ids[0], call.ids[1]);
  if (!round.ok()) return error_reply(round.status(), call.request);
  const ClientId id = call.caller.client;
  return long_poll(
      coordinator, call,
      [secure = *round, id](const Request& head) -> std::optional<Response> {
        auto message = ((*secure).*kRead)(id);
        if (!message.ok())
          return error_response(message.status(), head.version(), head.keep_alive());
        if (!message->has_value()) return std::nullopt;
        Response res{http::status::ok, head.version()};
        res.set(http::field::content_type, "application/json");
        res.keep_alive(head.keep_alive());
        res.body() = std::move(**message);
        res.prepare_payload();
        return res;
      },
      [&coordinator, id](std::function<void()> wake) {
        return coordinator.watch_secure_stages(id, std::move(wake));
      },
      [&coordinator, id](uint64_t handle) { coordinator.unwatch_secure_stages(id, handle); });
}

// A JSON header of an upload, or why it is missing or unreadable.
Result<json> json_header(const Request& req, const char* name) {
  auto header = req.find(name);
  if (header == req.end()) return invalid_argument(std::string("missing ") + name + " header");
  auto parsed =
      parse_untrusted_json(std::string_view(header->value().data(), header->value().size()));
  if (!parsed.ok()) return invalid_argument(std::string(name) + ": " + parsed.status().message());
  return parsed;
}

// An upload's answer (plain or masked), counted as accepted or refused.
Reply upload_reply(Coordinator& coordinator, const Result<UpdateAccepted>& accepted,
                   const Request& req) {
  if (accepted.ok()) {
    coordinator.metrics().add(metric::kUpdatesAccepted, {});
  } else {
    coordinator.metrics().add(metric::kUpdatesRefused,
                              {{"reason", code_name(accepted.status().code())}});
  }
  return result_reply(accepted, update_accepted_json, req);
}

// The masked vector, with its header (X-Fedcase-SecAgg) and the update's metadata
// (X-Fedcase-Meta): an upload, with upload body slots and limits.
Reply masked_input(Coordinator& coordinator, const Call& call) {
  const Request& req = call.request;
  auto accepted = coordinator.submit_masked_input(
      call.caller.client, call.ids[0], call.ids[1], json_header(req, kSecAggHeader),
      json_header(req, kMetaHeader), req.body(), call.context.receive_seconds);
  if (!accepted.ok()) count_refusal<kInputStage>(coordinator, accepted.status());
  return upload_reply(coordinator, accepted, req);
}

// Downloads (models, modules): the admin, a tenant for its own jobs, and a client for the job
// of a task it holds.
Reply get_module(Coordinator& coordinator, const Call& call) {
  auto module = coordinator.module(call.ids[0], call.scope(), call.client());
  if (!module.ok()) return error_reply(module.status(), call.request);
  return immutable_reply(call.request, module->checksum, module->bytes);
}

Reply get_model(Coordinator& coordinator, const Call& call) {
  auto model = coordinator.model(call.ids[0], call.ids[1], call.scope(), call.client());
  if (!model.ok()) return error_reply(model.status(), call.request);
  return immutable_reply(call.request, model->checksum, model->blob);
}

Reply get_trainable_part(Coordinator& coordinator, const Call& call) {
  auto part = coordinator.trainable_part(call.ids[0], call.ids[1], call.scope(), call.client());
  if (!part.ok()) return error_reply(part.status(), call.request);
  return immutable_reply(call.request, part->checksum, part->blob);
}

Reply list_models(Coordinator& coordinator, const Call& call) {
  return result_reply(coordinator.models(call.ids[0], call.scope()), models_json, call.request);
}

// An export: named for saving ("job-3-v12.pt"), with its SHA-256 as the ETag and as
// Repr-Digest; cacheable for good when asked by version number, revalidated when asked for
// "latest" or "best", which move on as the job trains.
Reply export_model(Coordinator& coordinator, const Call& call) {
  const Request& req = call.request;
  const auto params = query_params(call.query);
  auto format_param = params.find("format");
  auto format =
      parse_export_format(format_param == params.end() ? "torchscript" : format_param->second);
  if (!format.ok()) return error_reply(format.status(), req);
  const std::string& version = call.words[0];
  auto exported = coordinator.export_model(call.ids[0], version, *format, call.scope());
  if (!exported.ok()) return error_reply(exported.status(), req);
  Reply reply = immutable_reply(req, exported->sha256, exported->body);
  Response& res = reply.response;
  if (version == "latest" || version == "best") res.set(http::field::cache_control, "no-cache");
  res.set(http::field::content_disposition,
          "attachment; filename=\"job-" + std::to_string(call.ids[0]) + "-v" +
              std::to_string(exported->version) + export_extension(*format) + "\"");
  res.set("Repr-Digest", "sha-256=:" + hex_to_base64(exported->sha256) + ":");
  res.set("X-Fedcase-Model-Version", std::to_string(exported->version));
  return reply;
}

Reply task_status(Coordinator& coordinator, const Call& call) {
  return result_reply(coordinator.task_status(call.caller.client, call.ids[0], call.ids[1]),
                      admission_json, call.request);
}

Reply upload(Coordinator& coordinator, const Call& call) {
  const Request& req = call.request;
  // Parsed here, judged by the coordinator after its state checks.
  auto accepted = coordinator.submit_update(call.caller.client, call.ids[0], call.ids[1],
                                            json_header(req, kMetaHeader), req.body(),
                                            call.context.receive_seconds);
  return upload_reply(coordinator, accepted, req);
}

// An update reported ready for a cohort (docs/protocol.md, "Ready cohorts").
Reply report_ready(Coordinator& coordinator, const Call& call) {
  return result_reply(coordinator.report_ready(call.caller.client, call.ids[0], call.ids[1],
                                               json_header(call.request, kMetaHeader)),
                      update_accepted_json, call.request);
}

// Upload sessions (docs/protocol.md, "Uploads in chunks").
Reply open_upload(Coordinator& coordinator, const Call& call) {
  const Request& req = call.request;
  auto opened = coordinator.open_upload(call.caller.client, call.ids[0], call.ids[1],
                                        json_header(req, kMetaHeader), call.body);
  return result_reply(opened, upload_state_json, req, http::status::created);
}

Reply upload_state(Coordinator& coordinator, const Call& call) {
  return result_reply(
      coordinator.upload_state(call.caller.client, call.ids[0], call.ids[1], call.words[0]),
      upload_state_json, call.request);
}

// A chunk, placed by its Content-Range; the last one is answered as a plain upload is.
Reply upload_chunk(Coordinator& coordinator, const Call& call) {
  const Request& req = call.request;
  auto header = req.find(http::field::content_range);
  const Result<protocol::ContentRange> range =
      header == req.end()
          ? Result<protocol::ContentRange>(invalid_argument("missing Content-Range header"))
          : protocol::parse_content_range(
                std::string_view(header->value().data(), header->value().size()));
  auto answer = coordinator.put_upload_chunk(
      call.caller.client, call.ids[0], call.ids[1], call.words[0], range, req.body(),
      call.context.receive_seconds,
      call.context.body_cut_short ? Coordinator::ChunkBody::kCutShort
                                  : Coordinator::ChunkBody::kWhole);
  if (answer.ok() && answer->submitted) return upload_reply(coordinator, *answer->submitted, req);
  return result_reply(
      answer, [](const Coordinator::ChunkAnswer& a) { return upload_state_json(a.progress); },
      req);
}

// ---- the route table: routing, body limits and metric labels all read it ----

// What a route's body is, which sets its limit: kNone and kJson bodies are bounded by
// max_json_bytes (kJson ones are parsed before the handler runs), an update upload by
// max_upload_bytes, a chunk of an upload session by upload_chunk_bytes (both uploads: body
// slots, upload threads), a job submission by max_json_bytes, or, sent as multipart by the
// admin or a tenant, max_model_bytes + max_json_bytes.
enum class Body { kNone, kJson, kUpload, kChunk, kJobSubmission };

constexpr unsigned role_bit(Role role) { return 1u << static_cast<unsigned>(role); }
constexpr unsigned kAdminOnly = role_bit(Role::kAdmin);
constexpr unsigned kJobOwners = role_bit(Role::kAdmin) | role_bit(Role::kTenant);
constexpr unsigned kClients = role_bit(Role::kClient);
constexpr unsigned kDownloaders = kJobOwners | kClients;

struct Route {
  http::verb method;
  // Also the metrics label. A {name} segment is a decimal id (Call::ids), a [name] segment any
  // word (Call::words).
  std::string_view pattern;
  unsigned roles;  // role_bit()s of the callers allowed
  Body body;
  Reply (*handler)(Coordinator&, const Call&);
};

const Route kRoutes[] = {
    {http::verb::get, "/metrics", kAdminOnly | role_bit(Role::kMetrics), Body::kNone, metrics_page},
    {http::verb::get, "/v1/admin/jobs", kJobOwners, Body::kNone, list_jobs},
    {http::verb::post, "/v1/admin/jobs", kJobOwners, Body::kJobSubmission, create_job},
    {http::verb::get, "/v1/admin/jobs/{job}", kJobOwners, Body::kNone, job_detail},
    {http::verb::post, "/v1/admin/jobs/{job}/pause", kJobOwners, Body::kNone, control_job<kPause>},
    {http::verb::post, "/v1/admin/jobs/{job}/resume", kJobOwners, Body::kNone,
     control_job<kResume>},
    {http::verb::post, "/v1/admin/jobs/{job}/cancel", kJobOwners, Body::kNone,
     control_job<kCancel>},
    {http::verb::get, "/v1/admin/jobs/{job}/models", kJobOwners, Body::kNone, list_models},
    {http::verb::get, "/v1/admin/jobs/{job}/models/[version]/export", kJobOwners, Body::kNone,
     export_model},
    {http::verb::get, "/v1/admin/clients", kAdminOnly, Body::kNone, list_clients},
    {http::verb::get, "/v1/admin/tenants", kAdminOnly, Body::kNone, list_tenants},
    {http::verb::post, "/v1/admin/tenants", kAdminOnly, Body::kJson, create_tenant},
    {http::verb::post, "/v1/clients/register", role_bit(Role::kEnrollment), Body::kJson,
     register_client},
    {http::verb::post, "/v1/clients/heartbeat", kClients, Body::kJson, heartbeat},
    {http::verb::get, "/v1/task", kClients, Body::kNone, next_task},
    {http::verb::get, "/v1/jobs/{job}/module", kDownloaders, Body::kNone, get_module},
    {http::verb::get, "/v1/jobs/{job}/models/{version}", kDownloaders, Body::kNone, get_model},
    {http::verb::get, "/v1/jobs/{job}/models/{version}/trainable", kDownloaders, Body::kNone,
     get_trainable_part},
    {http::verb::get, "/v1/jobs/{job}/rounds/{round}/status", kClients, Body::kNone, task_status},
    {http::verb::post, "/v1/jobs/{job}/rounds/{round}/update", kClients, Body::kUpload, upload},
    {http::verb::post, "/v1/jobs/{job}/rounds/{round}/ready", kClients, Body::kNone,
     report_ready},
    {http::verb::post, "/v1/jobs/{job}/rounds/{round}/uploads", kClients, Body::kJson,
     open_upload},
    {http::verb::get, "/v1/jobs/{job}/rounds/{round}/uploads/[upload]", kClients, Body::kNone,
     upload_state},
    {http::verb::put, "/v1/jobs/{job}/rounds/{round}/uploads/[upload]", kClients, Body::kChunk,
     upload_chunk},
    {http::verb::post, "/v1/jobs/{job}/rounds/{round}/secagg/keys", kClients, Body::kJson,
     secure_message<kKeysStage, protocol::SecAggAdvertiseKeys, protocol::read_secagg_advertise_keys,
                    &SecureStages::receive_keys>},
    {http::verb::get, "/v1/jobs/{job}/rounds/{round}/secagg/keys", kClients, Body::kNone,
     secure_poll<&SecureStages::keys_reply>},
    {http::verb::post, "/v1/jobs/{job}/rounds/{round}/secagg/shares", kClients, Body::kJson,
     secure_message<kSharesStage, protocol::SecAggShares, protocol::read_secagg_shares,
                    &SecureStages::receive_shares>},
    {http::verb::get, "/v1/jobs/{job}/rounds/{round}/secagg/shares", kClients, Body::kNone,
     secure_poll<&SecureStages::forwarded_shares>},
    {http::verb::post, "/v1/jobs/{job}/rounds/{round}/secagg/masked_input", kClients, Body::kUpload,
     masked_input},
    {http::verb::get, "/v1/jobs/{job}/rounds/{round}/secagg/unmask", kClients, Body::kNone,
     secure_poll<&SecureStages::unmask_request>},
    {http::verb::post, "/v1/jobs/{job}/rounds/{round}/secagg/unmask", kClients, Body::kJson,
     secure_message<kUnmaskStage, protocol::SecAggUnmaskResponse,
                    protocol::read_secagg_unmask_response, &SecureStages::receive_unmask_response>},
};

// Whether a pattern's segment is a {name} or [name] placeholder.
bool placeholder(const std::string& segment) {
  return segment.front() == '{' || segment.front() == '[';
}

// Whether `path`'s segments fit `pattern`'s (a placeholder fits any segment).
bool fits(std::string_view pattern, const std::vector<std::string>& path) {
  const std::vector<std::string> want = split_path(pattern);
  if (want.size() != path.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!placeholder(want[i]) && want[i] != path[i]) return false;
  }
  return true;
}

std::string_view path_of(const http::request_header<>& header) {
  const std::string_view target(header.target().data(), header.target().size());
  return target.substr(0, target.find('?'));
}

// The route of `header`'s method and path, or nullptr; `methods` collects the methods of the
// routes whose pattern fits the path (for 405's Allow).
const Route* find_route(const http::request_header<>& header, std::string* methods = nullptr) {
  const std::vector<std::string> path = split_path(path_of(header));
  const Route* found = nullptr;
  for (const Route& route : kRoutes) {
    if (!fits(route.pattern, path)) continue;
    if (route.method == header.method()) found = &route;
    if (methods) {
      if (!methods->empty()) *methods += ", ";
      *methods += std::string(http::to_string(route.method));
    }
  }
  return found;
}

// The placeholders of `path` that `pattern` names (decoded): ids ({name}) and words ([name]).
struct PathArguments {
  std::vector<uint64_t> ids;
  std::vector<std::string> words;
};
// kInvalidArgument naming an id that is not a decimal number.
Result<PathArguments> path_arguments(std::string_view pattern, std::string_view path) {
  const std::vector<std::string> want = split_path(pattern), got = split_path(path);
  PathArguments out;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i].front() == '[') out.words.push_back(percent_decoded(got[i]));
    if (want[i].front() != '{') continue;
    auto id = parse_id(got[i]);
    if (!id) return invalid_argument(want[i].substr(1, want[i].size() - 2) + " must be a number");
    out.ids.push_back(*id);
  }
  return out;
}

}  // namespace

Api::Api(Coordinator& coordinator)
    : coordinator_(coordinator),
      limiter_(coordinator.config().requests_per_second,
               std::max(1.0, 2 * coordinator.config().requests_per_second)),
      unauthenticated_limiter_(coordinator.config().unauthenticated_per_second,
                               std::max(1.0, 2 * coordinator.config().unauthenticated_per_second)) {
}

bool Api::is_upload(const http::request_header<>& header) const {
  const Route* route = find_route(header);
  return route && (route->body == Body::kUpload || route->body == Body::kChunk);
}

std::string_view Api::route_label(const http::request_header<>& header) const {
  const std::string_view path = path_of(header);
  if (path == "/dashboard" || path.substr(0, 11) == "/dashboard/") return "/dashboard";
  if (path == "/healthz") return "/healthz";
  const std::vector<std::string> parts = split_path(path);
  for (const Route& route : kRoutes) {
    if (fits(route.pattern, parts)) return route.pattern;
  }
  return "other";
}

std::optional<Reply> Api::health(const Request& req) {
  if (path_of(req) != "/healthz") return std::nullopt;
  if (req.method() != http::verb::get) {
    Response res = json_response(
        http::status::method_not_allowed,
        protocol::write_error_reply({"method_not_allowed", "the health check is read with GET"}),
        req);
    res.set(http::field::allow, "GET");
    return answer(std::move(res));
  }
  const bool serving = coordinator_.database_health().ok();
  Response res = json_response(
      serving ? http::status::ok : http::status::service_unavailable,
      {{"status", serving ? "ok" : "database unreachable"}, {"replica", coordinator_.replica_id()}},
      req);
  res.set("X-Fedcase-Replica", coordinator_.replica_id());
  res.set(http::field::cache_control, "no-store");
  return answer(std::move(res));
}

std::optional<Reply> Api::dashboard(const Request& req) {
  std::string_view target(req.target().data(), req.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  if (path != "/" && path != "/dashboard" && path.substr(0, 11) != "/dashboard/") {
    return std::nullopt;
  }
  if (req.method() != http::verb::get) {
    Response res = json_response(
        http::status::method_not_allowed,
        protocol::write_error_reply({"method_not_allowed", "the dashboard is read with GET"}), req);
    res.set(http::field::allow, "GET");
    return answer(std::move(res));
  }
  if (path == "/" || path == "/dashboard") {
    Response res{http::status::found, req.version()};
    res.set(http::field::location, "/dashboard/");
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    return answer(std::move(res));
  }
  for (const DashboardFile& file : dashboard_files()) {
    if (file.url != path) continue;
    auto inm = req.find(http::field::if_none_match);
    const bool fresh =
        inm != req.end() && std::string_view(inm->value().data(), inm->value().size()) == file.etag;
    Response res{fresh ? http::status::not_modified : http::status::ok, req.version()};
    res.set(http::field::etag, file.etag);
    res.set(http::field::content_type, file.content_type);
    // The page loads only its own files and talks only to this coordinator.
    res.set("Content-Security-Policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
            "img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
    res.set("X-Content-Type-Options", "nosniff");
    res.set(http::field::cache_control, "no-cache");  // revalidate: a new build is seen at once
    res.keep_alive(req.keep_alive());
    if (fresh) {
      res.prepare_payload();
      return answer(std::move(res));
    }
    Reply reply = answer(std::move(res));
    reply.shared_body = file.body;
    return reply;
  }
  return error_reply(not_found("no such dashboard file"), req);
}

uint64_t Api::body_limit(const http::request_header<>& header) const {
  const CoordinatorConfig& config = coordinator_.config();
  const Route* route = find_route(header);
  if (route && route->body == Body::kUpload) return config.max_upload_bytes;
  if (route && route->body == Body::kChunk) return config.upload_chunk_bytes;
  if (route && route->body == Body::kJobSubmission && is_multipart(header)) {
    const Role role = coordinator_.identify(bearer_token(header)).role;
    if (route->roles & role_bit(role)) return config.max_model_bytes + config.max_json_bytes;
  }
  return config.max_json_bytes;
}

uint64_t Api::largest_body_limit() const {
  const CoordinatorConfig& config = coordinator_.config();
  return std::max<uint64_t>(config.max_upload_bytes,
                            config.max_model_bytes + config.max_json_bytes);
}

std::optional<Response> Api::refuse_unknown(const Request& header, const std::string& peer,
                                            Caller& caller) {
  caller = coordinator_.identify(bearer_token(header));
  if (caller.role != Role::kNone) return std::nullopt;
  // An unknown token is rate-limited by address before anything else is done for it.
  double retry_after = 0;
  if (!unauthenticated_limiter_.allow(peer, RateLimiter::Clock::now(), retry_after)) {
    return too_many_requests(retry_after, header);
  }
  if (coordinator_.unknown_token(bearer_token(header)) == Coordinator::UnknownToken::kLookingUp) {
    return error_response(unavailable("this replica is looking the token up; retry shortly"),
                          header.version(), header.keep_alive());
  }
  return error_response(unauthenticated("missing or unknown bearer token"), header.version(),
                        header.keep_alive());
}

std::optional<Response> Api::refuse_upload(const Request& header, const std::string& peer) {
  Caller caller;
  if (auto refusal = refuse_unknown(header, peer, caller)) return refusal;
  if (caller.role == Role::kClient) return std::nullopt;
  return error_response(permission_denied("only a registered client may upload an update"),
                        header.version(), header.keep_alive());
}

Reply Api::handle(const Request& req, const RequestContext& context) {
  try {
    if (std::optional<Reply> page = dashboard(req)) return std::move(*page);
    if (std::optional<Reply> check = health(req)) return std::move(*check);
    Caller caller;
    if (auto refusal = refuse_unknown(req, context.peer, caller))
      return answer(std::move(*refusal));
    double retry_after = 0;
    const std::string key(bearer_token(req));  // a known token: bounded, one key per caller
    if (!limiter_.allow(key, RateLimiter::Clock::now(), retry_after)) {
      return answer(too_many_requests(retry_after, req));
    }
    return route(req, caller, context);
  } catch (const std::exception& e) {
    // A bug: the details go to the log, never to the caller.
    log_error(std::string("request failed: ") + e.what());
    return error_reply(internal_error(std::string(kInternalErrorMessage)), req);
  }
}

Reply Api::route(const Request& req, const Caller& caller, const RequestContext& context) {
  std::string methods;
  const Route* route = find_route(req, &methods);
  if (!route && methods.empty()) return error_reply(not_found("no such endpoint"), req);
  if (!route) {
    Response res = json_response(
        http::status::method_not_allowed,
        protocol::write_error_reply({"method_not_allowed", "method not allowed here"}), req);
    res.set(http::field::allow, methods);
    return answer(std::move(res));
  }
  if (!(route->roles & role_bit(caller.role))) {
    return error_reply(permission_denied("this token may not do that"), req);
  }
  // Only a chunk keeps part of a body (whole pieces); any other request needs all of its.
  if (context.body_cut_short && route->body != Body::kChunk) {
    return error_reply(invalid_argument("the request's body was cut short"), req);
  }
  const std::string_view target(req.target().data(), req.target().size());
  const size_t q = target.find('?');
  auto arguments = path_arguments(route->pattern, path_of(req));
  if (!arguments.ok()) return error_reply(arguments.status(), req);
  Call call{req,
            caller,
            std::move(arguments->ids),
            std::move(arguments->words),
            json(),
            q == std::string_view::npos ? std::string_view() : target.substr(q + 1),
            context};
  if (route->body == Body::kJson) {
    auto body = parse_json_body(req);
    if (!body.ok()) return error_reply(body.status(), req);
    call.body = std::move(body).value();
  }
  return route->handler(coordinator_, call);
}

}  // namespace fedcase::server
