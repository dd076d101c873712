// Replays the committed corpus: every file of fuzz/corpus/<name>/ through the harness
// registered as <name> (fuzz/fuzz_target.h), so an input that once crashed a harness stays a
// regression test in the normal build. A harness reports a broken contract by aborting, which
// fails this test with the harness's message; every harness linked here must have a
// non-empty corpus.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "fuzz/fuzz_target.h"

namespace fs = std::filesystem;

TEST_CASE("every corpus input runs through its harness") {
  REQUIRE_FALSE(fedcase::fuzz::fuzz_targets().empty());
  for (const auto& target : fedcase::fuzz::fuzz_targets()) {
    const std::string& name = target.first;
    const fs::path dir = fs::path(FEDCASE_SOURCE_DIR) / "fuzz" / "corpus" / name;
    INFO("harness ", name, ", corpus ", dir.string());
    REQUIRE(fs::is_directory(dir));
    size_t inputs = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      const std::string file = entry.path().filename().string();
      INFO("input ", file);
      std::ifstream in(entry.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      CHECK(target.second(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) == 0);
      ++inputs;
    }
    CHECK(inputs > 0);
  }
}
