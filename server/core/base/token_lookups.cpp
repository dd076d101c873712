#include "server/core/base/token_lookups.h"

#include "common/log.h"

namespace fedcase::server {

TokenLookups::TokenLookups(Learn learn) : learn_(std::move(learn)), thread_([this] { run(); }) {}

TokenLookups::~TokenLookups() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

TokenLookups::Answer TokenLookups::ask(const std::string& token_hash) {
  {
    MutexLock lock(mu_);
    if (nobody_.count(token_hash)) return Answer::kNobody;
    if (queued_.count(token_hash) || queue_.size() >= kMaxQueued) return Answer::kLookingUp;
    queue_.push_back(token_hash);
    queued_.insert(token_hash);
  }
  cv_.notify_one();
  return Answer::kLookingUp;
}

void TokenLookups::run() {
  while (true) {
    std::string hash;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) cv_.wait(mu_);
      if (stopping_) return;
      hash = std::move(queue_.front());
      queue_.pop_front();
    }
    const Result<std::optional<ClientId>> found = learn_(hash);
    if (!found.ok()) log_warn("cannot look a client's token up: " + found.status().to_string());
    MutexLock lock(mu_);
    queued_.erase(hash);
    if (found.ok() && !*found && nobody_.insert(hash).second) {
      nobody_order_.push_back(hash);
      if (nobody_order_.size() > kMaxUnknown) {
        nobody_.erase(nobody_order_.front());
        nobody_order_.pop_front();
      }
    }
  }
}

}  // namespace fedcase::server
