#pragma once
// What the process writes to stderr (the log, common/log.h) while a StderrCapture lives, for
// tests that check what reaches the operator's log. One at a time; not thread-safe.

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace fedcase::testing {

class StderrCapture {
 public:
  StderrCapture() : file_(std::tmpfile()) {
    REQUIRE(file_ != nullptr);
    std::fflush(stderr);
    saved_ = dup(STDERR_FILENO);
    REQUIRE(dup2(fileno(file_), STDERR_FILENO) >= 0);
  }
  ~StderrCapture() {
    restore();
    std::fclose(file_);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  // Stops capturing and returns what was written.
  std::string text() {
    restore();
    std::string out;
    std::rewind(file_);
    char buffer[4096];
    size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof(buffer), file_)) > 0) out.append(buffer, n);
    return out;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    saved_ = -1;
  }
  FILE* file_;
  int saved_ = -1;
};

}  // namespace fedcase::testing
