#pragma once
// Peak resident memory of a benchmark phase (Linux): the kernel's peak-RSS counter is reset
// (writing 5 to /proc/self/clear_refs) and VmRSS read when the probe is made; VmHWM minus that
// baseline is the phase's peak. Shared by the benchmarks that report memory.
// Thread safety: a probe is used by one thread; phases must not overlap.

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

namespace fedcase::bench {

// One field of /proc/self/status in bytes (its values are in kB); 0 if absent.
inline size_t status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.compare(0, field.size() + 1, field + ":") == 0) {
      return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10) * 1024;
    }
  }
  return 0;
}

// Peak resident memory of one phase above the resident memory when it started.
class PeakProbe {
 public:
  PeakProbe() {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    reset_ok_ = clear.good();
    baseline_ = status_bytes("VmRSS");
  }
  // nullopt when the peak counter could not be reset (VmHWM would include earlier phases).
  std::optional<size_t> peak_bytes() const {
    if (!reset_ok_) return std::nullopt;
    const size_t hwm = status_bytes("VmHWM");
    return hwm > baseline_ ? hwm - baseline_ : 0;
  }

 private:
  bool reset_ok_ = false;
  size_t baseline_ = 0;
};

}  // namespace fedcase::bench
