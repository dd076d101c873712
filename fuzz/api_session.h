#pragma once
// A real coordinator behind the HTTP API, without sockets, for harnesses whose input is what
// a client or an operator sends.
//
// The first session builds a template database in a fresh temp dir (under $TMPDIR, which
// scripts/fuzz.sh points at /dev/shm so SQLite's fsyncs cost nothing): job 1 ("fuzz": mlp,
// one client a round, a 5 s fixed deadline, 3 rounds) and one registered client. Every
// session opens a Coordinator on its own copy of that database, with a clock the session
// moves and an evaluator that scores every model 0.5 when the session says so, and ticks the
// round driver once: each input starts from the same state, round 1 of job 1 open and
// inviting the client.
//
// Thread safety: one session at a time, on one thread (the round driver's thread is not
// started). Errors: setting up the template or a session aborts (a harness bug, not a
// finding); a request's answer is checked by handle().

#include <boost/beast/http.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/api/api.h"
#include "server/core/coordinator.h"

namespace fedcase::fuzz {

enum class Token { kAdmin, kEnrollment, kClient };

class DeferredEvaluator;

class ApiSession {
 public:
  ApiSession();
  ~ApiSession();
  ApiSession(const ApiSession&) = delete;
  ApiSession& operator=(const ApiSession&) = delete;

  // The bearer token of `who`; the client's is the template client's.
  static const std::string& token(Token who);

  // Parses the request at the front of `bytes` the way the server's sessions do
  // (server/http_server.cpp: 16 KiB header limit, the route's body limit from
  // Api::body_limit, only chunked transfer coding) and removes its bytes. nullopt when the
  // bytes hold no complete request that the server would route: it answers those (413, 400)
  // or waits for more without calling the API.
  std::optional<server::Request> parse(std::string_view& bytes) const;

  // Handles one request as the server would and checks the answer: never a 500 (a bug: an
  // exception reached Api::handle's last resort), and JSON answers are valid JSON. A long
  // poll is polled once more and its watch set and cancelled. Then the round driver ticks,
  // queued evaluations run and the clock moves on by one second. With FEDCASE_FUZZ_TRACE set
  // in the environment, each request and its answer are printed to stderr.
  server::Response handle(const server::Request& request);

  // An update for the current model of job 1 that the coordinator accepts: every parameter
  // moved by 0.01.
  std::string valid_update();

 private:
  DeferredEvaluator* evaluator_ = nullptr;  // owned by coordinator_
  double now_;
  std::unique_ptr<server::Coordinator> coordinator_;
  std::unique_ptr<server::Api> api_;
};

}  // namespace fedcase::fuzz
