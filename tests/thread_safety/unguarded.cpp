// Must NOT compile under scripts/thread_safety.py: it touches a guarded member without its
// lock. The check compiles it first, so a clang or flag that stopped enforcing the marks would
// fail the check instead of passing every file.
#include "common/mutex.h"

namespace {

class Counter {
 public:
  void add() { ++count_; }  // no MutexLock: the analysis must refuse this

 private:
  fedcase::Mutex mu_;
  int count_ FEDCASE_GUARDED_BY(mu_) = 0;
};

}  // namespace

int main() {
  Counter c;
  c.add();
}
