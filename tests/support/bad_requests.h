#pragma once
// The bad requests of the bad-input suites, each with the answer it must get, aimed at a port:
// a single coordinator's (tests/integration/bad_input_test.cpp, abuse_test.cpp), or a
// replica's or a load balancer's in front of replicas (cluster_abuse_test.cpp). None of them
// may change the store: the tests compare tests/support/store_snapshot.h before and after.

#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/blob.h"
#include "tests/support/coordinator_harness.h"

namespace fedcase::testing {

// `depth` nested JSON arrays: [[[...]]].
inline std::string nested_json(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

// A reply's error code, "<no JSON error>" when it has none.
inline std::string error_code(const Reply& r) {
  return r.body.is_object() && r.body.contains("error") ? r.body["error"]["code"].get<std::string>()
                                                        : std::string("<no JSON error>");
}

// A request sent over HTTP, and the status and error code it must get.
struct BadRequest {
  std::string what;
  std::function<Reply()> send;
  int status;
  std::string code;
  // HAProxy's status when it refuses the request itself (tests/support/haproxy_process.h; its
  // answer has no JSON error), 0 when it forwards it.
  int proxied_status = 0;
};

// Checks that `reply` is the answer `request` must get, from a coordinator or, with
// `through_haproxy`, through HAProxy in front of replicas.
inline void check_answer(const BadRequest& request, const Reply& reply,
                         bool through_haproxy = false) {
  if (through_haproxy && request.proxied_status != 0) {
    CHECK(reply.status == request.proxied_status);
    return;
  }
  CHECK(reply.status == request.status);
  CHECK(error_code(reply) == request.code);
}

// The job the bad uploads aim at, job 1 of a fresh store: one round of K = 3 MLP clients, no
// over-commitment, a deadline far away, and a bound on an update's norm (1000).
inline nlohmann::json bad_input_job() {
  return {{"name", "bad-input"},
          {"model", "mlp"},
          {"rounds", 1},
          {"clients_per_round", 3},
          {"selection", {{"overcommit", 1.0}}},
          {"training", {{"deadline", {{"mode", "fixed"}, {"seconds", 300}}}}},
          {"max_update_norm", 1000}};
}

// An update of `values` on model `version` with `layout`, as an upload's body.
inline std::string update_body(std::vector<float> values, uint64_t version, ModelLayout layout) {
  return encode_blob(ModelBlob{version, std::move(layout), std::move(values)});
}

// An update's metadata that a coordinator accepts.
inline std::string good_update_meta() {
  return nlohmann::json{{"samples", 200}, {"loss_sum", 100.0}}.dump();
}

// `client`'s upload of `body` to `url` with metadata `meta`.
inline Reply upload(Caller& client, const std::string& url, const std::string& body,
                    const std::string& meta) {
  return client.call("POST", url, body,
                     {{"Content-Type", "application/octet-stream"}, {"X-Fedcase-Meta", meta}});
}

// Waits (up to 60 s) until round 1 of job 1 (bad_input_job()) is committed and evaluated, as
// `admin` (the admin's caller) reads it, and checks that it counted its three updates.
inline void check_round_committed(Caller& admin) {
  nlohmann::json detail;
  REQUIRE(wait_until(
      [&] {
        detail = admin.get("/v1/admin/jobs/1").body;
        // Evaluated too: its metrics are written once, after the commit.
        auto rounds = committed_rounds(detail);
        return rounds.size() == 1 && rounds[0]["metrics"].contains("test_accuracy");
      },
      60));
  CHECK(committed_rounds(detail)[0]["metrics"]["updates"] == 3);
}

// What the bad requests aim at: job 1 (bad_input_job()) with its round 1 open, reached at
// `port`.
struct BadInputTarget {
  uint16_t port = 0;
  std::string invitee_token;   // a client invited to round 1 that has not uploaded to it
  std::string outsider_token;  // a registered client not invited to round 1
  std::string upload_url;      // round 1's, from the invitee's task
  std::string model_url;       // the invitee's task's base model
  ModelBlob base;              // round 1's base model
  size_t max_json_bytes = 0;   // the coordinator's limits
  size_t max_upload_bytes = 0;
};

// Bad tokens, bodies over the limits, malformed and invalid JSON and metadata, updates of the
// wrong shape, non-finite, too large, on a stale version, for a round not open or from a client
// not invited, bad targets: each refused with its status and error code. The requests use
// connections of their own, opened on first use.
inline std::vector<BadRequest> bad_requests(const BadInputTarget& t) {
  const uint16_t port = t.port;
  auto admin = std::make_shared<Caller>(port, kAdminToken);
  auto anonymous = std::make_shared<Caller>(port, "");
  auto enroll = std::make_shared<Caller>(port, kEnrollmentToken);
  auto invitee = std::make_shared<Caller>(port, t.invitee_token);
  auto outsider = std::make_shared<Caller>(port, t.outsider_token);
  const std::string url = t.upload_url;
  const std::string model_url = t.model_url;
  const std::string meta = good_update_meta();
  const std::vector<float> zeros(t.base.data.size(), 0.0f);
  const std::string good = update_body(zeros, 0, t.base.layout);
  std::vector<float> nan_values = zeros, inf_values = zeros, huge_values = zeros;
  nan_values[7] = std::numeric_limits<float>::quiet_NaN();
  inf_values[3] = -std::numeric_limits<float>::infinity();
  huge_values[0] = 5000;
  ModelLayout wrong_layout = t.base.layout;
  wrong_layout.tensors.back().shape = {5, 2};
  ModelLayout bad_name_layout = t.base.layout;
  bad_name_layout.tensors.front().name =
      "\xff\xfe"
      "conv";
  auto upload_of = [invitee, url, meta](std::string body) {
    return
        [invitee, url, meta, body = std::move(body)] { return upload(*invitee, url, body, meta); };
  };
  const std::string oversized_upload(t.max_upload_bytes + (1 << 20), 'x');
  const std::string oversized_name(t.max_json_bytes + 1000, 'x');
  return {
      {"no token", [=] { return anonymous->get("/v1/task"); }, 401, "unauthenticated"},
      {"unknown token",
       [=] {
         Caller stranger(port, "not-a-real-token-at-all");
         return stranger.get("/v1/task");
       },
       401, "unauthenticated"},
      {"client on admin API", [=] { return invitee->get("/v1/admin/jobs"); }, 403,
       "permission_denied"},
      {"client creates a job", [=] { return invitee->post("/v1/admin/jobs", bad_input_job()); },
       403, "permission_denied"},
      {"client pauses a job",
       [=] { return invitee->post("/v1/admin/jobs/1/pause", nlohmann::json::object()); }, 403,
       "permission_denied"},
      {"enrollment key polls tasks", [=] { return enroll->get("/v1/task"); }, 403,
       "permission_denied"},
      {"admin uploads",
       [=] {
         return admin->call("POST", url, good, {{"X-Fedcase-Meta", meta}});
       },
       403, "permission_denied"},
      {"outsider downloads the round's model", [=] { return outsider->get(model_url); }, 403,
       "permission_denied"},
      {"invitee downloads another version", [=] { return invitee->get("/v1/jobs/1/models/7"); },
       403, "permission_denied"},
      {"job body over the limit",
       [=] {
         return admin->post("/v1/admin/jobs", {{"name", oversized_name}});
       },
       413, "too_large"},
      {"upload over the limit", [=] { return upload(*invitee, url, oversized_upload, meta); }, 413,
       "too_large"},
      {"malformed job JSON",
       [=] { return admin->call("POST", "/v1/admin/jobs", "{\"name\": ", {}); }, 400,
       "invalid_argument"},
      {"malformed registration JSON",
       [=] { return enroll->call("POST", "/v1/clients/register", "[1,2", {}); }, 400,
       "invalid_argument"},
      {"invalid job config",
       [=] {
         return admin->post("/v1/admin/jobs", {{"name", "x"}, {"clients_per_round", -1}});
       },
       400, "invalid_argument"},
      {"malformed metadata", [=] { return upload(*invitee, url, good, "{samples"); }, 400,
       "invalid_argument"},
      {"metadata without samples", [=] { return upload(*invitee, url, good, "{}"); }, 400,
       "invalid_argument"},
      {"corrupt blob", upload_of(good.substr(0, good.size() - 9)), 400, "invalid_argument"},
      {"wrong shape", upload_of(update_body(zeros, 0, wrong_layout)), 422, "unprocessable"},
      {"wrong length",
       upload_of(update_body(std::vector<float>(zeros.size() - 1), 0, t.base.layout)), 400,
       "invalid_argument"},
      {"NaN", upload_of(update_body(nan_values, 0, t.base.layout)), 422, "unprocessable"},
      {"Inf", upload_of(update_body(inf_values, 0, t.base.layout)), 422, "unprocessable"},
      {"norm over the bound", upload_of(update_body(huge_values, 0, t.base.layout)), 422,
       "unprocessable"},
      {"stale model version", upload_of(update_body(zeros, 9, t.base.layout)), 422,
       "unprocessable"},
      {"client not invited", [=] { return upload(*outsider, url, good, meta); }, 403,
       "permission_denied"},
      {"round that does not exist",
       [=] { return upload(*invitee, "/v1/jobs/1/rounds/7/update", good, meta); }, 409, "conflict"},
      {"job JSON nested too deep",
       [=] {
         return admin->call("POST", "/v1/admin/jobs",
                            "{\"name\":\"x\",\"selection\":" + nested_json(200) + "}", {});
       },
       400, "invalid_argument"},
      {"metadata nested too deep", [=] { return upload(*invitee, url, good, nested_json(200)); },
       400, "invalid_argument"},
      {"no metadata, not invited",
       [=] {
         return outsider->call("POST", url, good, {{"Content-Type", "application/octet-stream"}});
       },
       403, "permission_denied"},
      {"no metadata, round not open",
       [=] { return invitee->call("POST", "/v1/jobs/1/rounds/7/update", good, {}); }, 409,
       "conflict"},
      {"no metadata", [=] { return invitee->call("POST", url, good, {}); }, 400,
       "invalid_argument"},
      {"tensor name with invalid UTF-8", upload_of(update_body(zeros, 0, bad_name_layout)), 422,
       "unprocessable"},
      {"shapes larger than the blob",
       upload_of(update_body({}, 0, ModelLayout{{{"w", {1u << 30, 1u << 30}}}})), 400,
       "invalid_argument"},
      {"URL with invalid UTF-8",
       [=] { return admin->post("/v1/admin/jobs/1/\xff\xfe", nlohmann::json::object()); }, 404,
       "not_found", 400},
      {"unknown job", [=] { return admin->get("/v1/admin/jobs/42"); }, 404, "not_found"},
      {"bad job action",
       [=] { return admin->post("/v1/admin/jobs/1/explode", nlohmann::json::object()); }, 404,
       "not_found"},
  };
}

// JSON nested 60,000 deep (about 120 KB, within a 1 MiB body limit) in every JSON route's body
// and inside its objects: each refused with 400, never fatal. `client_token`: a registered
// client's.
inline std::vector<BadRequest> deep_json_requests(uint16_t port, const std::string& client_token) {
  auto admin = std::make_shared<Caller>(port, kAdminToken);
  auto enroll = std::make_shared<Caller>(port, kEnrollmentToken);
  auto client = std::make_shared<Caller>(port, client_token);
  const std::string deep = nested_json(60000);
  auto refused = [](const char* what, std::shared_ptr<Caller> caller, std::string path,
                    std::string body) {
    auto send = [caller, path = std::move(path), body = std::move(body)] {
      return caller->call("POST", path, body, {{"Content-Type", "application/json"}});
    };
    return BadRequest{std::string("deep JSON: ") + what, send, 400, "invalid_argument", 0};
  };
  return {
      refused("register", enroll, "/v1/clients/register", deep),
      refused("register device", enroll, "/v1/clients/register", "{\"device\":" + deep + "}"),
      refused("heartbeat", client, "/v1/clients/heartbeat", "{\"a\":" + deep + "}"),
      refused("job selection", admin, "/v1/admin/jobs",
              "{\"name\":\"j\",\"selection\":" + deep + "}"),
      refused("job training", admin, "/v1/admin/jobs",
              "{\"name\":\"j\",\"training\":" + deep + "}"),
  };
}

// How the guesses of guess_tokens() were answered.
struct Guesses {
  int sent = 0;
  int unauthorized = 0;  // 401
  int limited = 0;       // 429, with Retry-After
  int looked_up = 0;     // 503, with Retry-After: a replica looks the token up in its store
};

// `passes` times, every route that takes a token (job 1, round 1) called at `port` with a
// token nobody has.
inline Guesses guess_tokens(uint16_t port, int passes) {
  const std::vector<std::pair<std::string, std::string>> routes = {
      {"POST", "/v1/clients/register"},
      {"POST", "/v1/clients/heartbeat"},
      {"GET", "/v1/task?wait=0"},
      {"GET", "/v1/jobs/1/models/0"},
      {"GET", "/v1/jobs/1/rounds/1/status"},
      {"POST", "/v1/jobs/1/rounds/1/update"},
      {"GET", "/v1/admin/jobs"},
      {"POST", "/v1/admin/jobs/1/pause"},
      {"GET", "/v1/admin/clients"},
      {"GET", "/v1/admin/jobs/1"}};
  Caller guesser(port, "not-a-token-at-all-0123456789abcdef");
  Guesses out;
  for (int pass = 0; pass < passes; ++pass) {
    for (const auto& [method, path] : routes) {
      Reply r = guesser.call(method, path, method == "POST" ? "{}" : "");
      ++out.sent;
      out.unauthorized += r.status == 401;
      out.limited += r.status == 429;
      out.looked_up += r.status == 503;
      if (r.status == 429 || r.status == 503) CHECK(!r.response.header("retry-after").empty());
    }
  }
  return out;
}

// A raw GET request for `target` with `token`.
inline std::string get_request(const std::string& target, const std::string& token,
                               const std::string& version = "HTTP/1.1") {
  return "GET " + target + " " + version + "\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token +
         "\r\n\r\n";
}

// Bytes no HTTP client would send, and how an answer to them must begin: from a coordinator,
// and from HAProxy in front of replicas (which refuses some of them itself, tests/support/
// haproxy_process.h).
struct RawBadRequest {
  std::string what;
  std::string bytes;
  std::string answer;
  std::string proxied_answer;
};

inline std::vector<RawBadRequest> absurd_requests() {
  return {
      {"20 KB header",
       "GET /v1/admin/jobs HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n",
       "HTTP/1.1 413", "HTTP/1.1 400"},
      {"10 KB target", get_request("/v1/" + std::string(10000, 'a'), kAdminToken), "HTTP/1.1 404",
       "HTTP/1.1 404"},
      {"job id past 64 bits", get_request("/v1/admin/jobs/99999999999999999999999", kAdminToken),
       "HTTP/1.1 400", "HTTP/1.1 400"},
      {"negative job id", get_request("/v1/admin/jobs/-1", kAdminToken), "HTTP/1.1 400",
       "HTTP/1.1 400"},
      {"job id 2^64", get_request("/v1/jobs/18446744073709551616/models/1", kAdminToken),
       "HTTP/1.1 400", "HTTP/1.1 400"},
      {"TLS to a plain port", "\x16\x03\x01 not HTTP at all\r\n\r\n", "HTTP/1.1 400",
       "HTTP/1.1 400"},
      {"two Content-Lengths",
       "GET /v1/admin/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
       "HTTP/1.1 400", "HTTP/1.1 400"},
      {"Content-Length past 64 bits",
       "POST /v1/clients/heartbeat HTTP/1.1\r\nHost: x\r\nContent-Length: "
       "99999999999999999999\r\n\r\n",
       "HTTP/1.1 4", "HTTP/1.1 4"},
  };
}

}  // namespace fedcase::testing
