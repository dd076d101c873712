#pragma once
// How a harness declares its entry point. One harness source builds two ways:
//  - with FEDCASE_LIBFUZZER defined (the FEDCASE_FUZZ build): FEDCASE_FUZZ_TARGET(name)
//    defines LLVMFuzzerTestOneInput, and the file links into its own libFuzzer binary;
//  - otherwise: it defines a static function and registers it under `name` in fuzz_targets(),
//    so fuzz_corpus_test can link every harness at once and replay fuzz/corpus/<name>/.
//
// A harness must never crash, leak or trip a sanitizer on any input; when it finds a broken
// contract in fedcase code it calls fuzz_fail(), which aborts (a crash for libFuzzer).
// Thread safety: harnesses are called from one thread.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

namespace fedcase::fuzz {

using FuzzFunction = int (*)(const uint8_t* data, size_t size);

// Every harness linked into this binary, by name (only outside the libFuzzer build).
inline std::map<std::string, FuzzFunction>& fuzz_targets() {
  static std::map<std::string, FuzzFunction> targets;
  return targets;
}

inline bool register_fuzz_target(const char* name, FuzzFunction function) {
  fuzz_targets()[name] = function;
  return true;
}

// Reports a broken contract and aborts.
[[noreturn]] inline void fuzz_fail(std::string_view what) {
  std::fprintf(stderr, "fuzz contract broken: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace fedcase::fuzz

#ifdef FEDCASE_LIBFUZZER
#define FEDCASE_FUZZ_TARGET(name) \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
#else
#define FEDCASE_FUZZ_TARGET(name)                                \
  static int fuzz_##name(const uint8_t* data, size_t size);      \
  [[maybe_unused]] static const bool fuzz_registered_##name =    \
      ::fedcase::fuzz::register_fuzz_target(#name, fuzz_##name); \
  static int fuzz_##name(const uint8_t* data, size_t size)
#endif
