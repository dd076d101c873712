#pragma once
// Bearer tokens a replica does not know yet, looked up in the store off the request threads.
// A client registered through another replica a moment ago presents a token this replica has
// not read yet; a request must neither wait for the database (an I/O thread that waits holds
// up every connection it serves, /healthz included) nor be refused for good. So a request with
// an unknown token asks here: the token is either known to be nobody's (a lookup found no
// client holding it), or being looked up on this object's own thread, and the caller answers
// "retry shortly". What a lookup finds joins the client registry, where the next request
// finds it.
//
// Bounded: at most kMaxQueued lookups wait (more are answered "pending" without a lookup), one
// runs at a time, and at most kMaxUnknown tokens are remembered as nobody's (the oldest go
// first). A lookup the store cannot answer remembers nothing. Callers rate-limit unknown
// tokens per address before they ask (server/api/api.h).
//
// Thread safety: ask() may be called from any thread; `learn` runs on the object's thread.

#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "common/ids.h"
#include "common/mutex.h"
#include "common/status.h"

namespace fedcase::server {

class TokenLookups {
 public:
  static constexpr size_t kMaxQueued = 256;
  static constexpr size_t kMaxUnknown = 16384;

  // `learn` looks a token's hash up in the store and adds what it finds to the registry: the
  // client's id, nullopt for a token no client holds, or the store's error.
  using Learn = std::function<Result<std::optional<ClientId>>(const std::string& token_hash)>;
  explicit TokenLookups(Learn learn);
  ~TokenLookups();  // finishes the lookup under way, drops the rest, joins

  enum class Answer {
    kNobody,     // no client holds the token
    kLookingUp,  // being looked up (or too many are): ask again shortly
  };
  Answer ask(const std::string& token_hash) FEDCASE_EXCLUDES(mu_);

 private:
  void run() FEDCASE_EXCLUDES(mu_);

  const Learn learn_;
  Mutex mu_;
  CondVar cv_;
  std::deque<std::string> queue_ FEDCASE_GUARDED_BY(mu_);
  std::set<std::string> queued_ FEDCASE_GUARDED_BY(mu_);          // in queue_, or being looked up
  std::set<std::string> nobody_ FEDCASE_GUARDED_BY(mu_);          // looked up: no client holds them
  std::deque<std::string> nobody_order_ FEDCASE_GUARDED_BY(mu_);  // oldest first
  bool stopping_ FEDCASE_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fedcase::server
