// Fuzzes the coordinator's whole request path without sockets: raw bytes through Beast's
// request parser with the server's limits, then Api::handle on a real Coordinator over
// SQLite (fuzz/api_session.h), every route and every store write behind it.
//
// Input: up to kMaxRequests requests, each a selector byte followed by the bytes of one
// HTTP/1.1 request. The selector sets the Authorization header: 'a' the admin token, 'e' the
// enrollment token, 'c' the client's token; any other byte leaves the request's own headers.
// A body of exactly "@update" becomes a valid update of job 1's current model, so inputs
// reach an accepted upload and a committed round without carrying 400 KB of floats. Parsing
// stops at the first request the server would not route and after one that asks to close.

#include <boost/beast/http.hpp>

#include "fuzz/api_session.h"
#include "fuzz/fuzz_target.h"

namespace {

namespace http = boost::beast::http;
using fedcase::fuzz::ApiSession;
using fedcase::fuzz::Token;

constexpr int kMaxRequests = 8;

void authorize(char selector, fedcase::server::Request& request) {
  Token who;
  switch (selector) {
    case 'a':
      who = Token::kAdmin;
      break;
    case 'e':
      who = Token::kEnrollment;
      break;
    case 'c':
      who = Token::kClient;
      break;
    default:
      return;
  }
  request.set(http::field::authorization, "Bearer " + ApiSession::token(who));
}

}  // namespace

FEDCASE_FUZZ_TARGET(http_request) {
  std::string_view bytes = fedcase::fuzz::as_text(data, size);
  ApiSession session;
  for (int i = 0; i < kMaxRequests && !bytes.empty(); ++i) {
    const char selector = bytes.front();
    bytes.remove_prefix(1);
    auto request = session.parse(bytes);
    if (!request) break;
    authorize(selector, *request);
    if (request->body() == "@update") {
      request->body() = session.valid_update();
      request->prepare_payload();
    }
    session.handle(*request);
    if (!request->keep_alive()) break;
  }
  return 0;
}
