// Fuzzes what a client's own report goes through: the body of POST /v1/clients/register
// (device probe measurements, dataset size, cache capacity: they seed the client's scheduling
// profile) and of POST /v1/clients/heartbeat, through Api::handle on a real Coordinator
// (fuzz/api_session.h). Input: one JSON body. It registers a client; when that succeeds the
// new client sends it as a heartbeat, and the admin lists the clients (every profile turned
// into JSON, with the expected duration of job 1's task for each); the template client also
// sends it as a heartbeat.

#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "fuzz/api_session.h"
#include "fuzz/fuzz_target.h"

namespace {

namespace http = boost::beast::http;
using fedcase::fuzz::ApiSession;
using fedcase::fuzz::Token;

fedcase::server::Request request(http::verb method, const char* target, const std::string& token,
                                 std::string_view body) {
  fedcase::server::Request r{method, target, 11};
  r.set(http::field::authorization, "Bearer " + token);
  r.set(http::field::content_type, "application/json");
  r.body() = std::string(body);
  r.prepare_payload();
  return r;
}

}  // namespace

FEDCASE_FUZZ_TARGET(client_body) {
  const std::string_view body = fedcase::fuzz::as_text(data, size);
  ApiSession session;
  auto registered = session.handle(request(http::verb::post, "/v1/clients/register",
                                           ApiSession::token(Token::kEnrollment), body));
  if (registered.result() == http::status::created) {
    const auto reply = nlohmann::json::parse(registered.body());
    session.handle(request(http::verb::post, "/v1/clients/heartbeat",
                           reply.at("token").get<std::string>(), body));
    session.handle(
        request(http::verb::get, "/v1/admin/clients", ApiSession::token(Token::kAdmin), ""));
  }
  session.handle(
      request(http::verb::post, "/v1/clients/heartbeat", ApiSession::token(Token::kClient), body));
  return 0;
}
