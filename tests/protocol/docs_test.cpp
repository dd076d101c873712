// docs/protocol.md documents every field of every wire message in a table announced by
// `<!-- fields: <message> -->` (messages.h names them). A field documented but not read, or
// read but not documented, fails here.

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "protocol/messages.h"

namespace fedcase::protocol {
namespace {

// Every `quoted` name in the first cell of a table row ("| `a`, `b` | ... |").
std::vector<std::string> names_in_first_cell(const std::string& row) {
  std::vector<std::string> names;
  const size_t start = row.find('|');
  const size_t end = row.find('|', start + 1);
  const std::string cell = row.substr(start + 1, end - start - 1);
  for (size_t open = cell.find('`'); open != std::string::npos; open = cell.find('`', open)) {
    const size_t close = cell.find('`', open + 1);
    if (close == std::string::npos) break;
    names.push_back(cell.substr(open + 1, close - open - 1));
    open = close + 1;
  }
  return names;
}

// The documented fields of each message: the first cells of the table after its marker.
std::map<std::string, std::vector<std::string>> documented_fields(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in, "cannot read " << path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  const std::string marker = "<!-- fields: ";
  std::map<std::string, std::vector<std::string>> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind(marker, 0) != 0) continue;
    const std::string name = lines[i].substr(marker.size(), lines[i].find(" -->") - marker.size());
    INFO("table of ", name, " at line ", i + 1);
    CHECK_MESSAGE(out.count(name) == 0, "documented twice");
    std::vector<std::string>& fields = out[name];
    size_t row = i + 1;
    while (row < lines.size() && lines[row].empty()) ++row;
    // The header and the separator, then one row per field up to the table's end.
    REQUIRE(row + 1 < lines.size());
    REQUIRE(lines[row].rfind("|", 0) == 0);
    REQUIRE(lines[row + 1].rfind("|---", 0) == 0);
    for (row += 2; row < lines.size() && lines[row].rfind("|", 0) == 0; ++row) {
      const auto names = names_in_first_cell(lines[row]);
      CHECK_MESSAGE(!names.empty(), "a row names no field: " << lines[row]);
      fields.insert(fields.end(), names.begin(), names.end());
    }
  }
  return out;
}

TEST_CASE("docs/protocol.md documents exactly the fields each message's reader reads") {
  auto documented = documented_fields(std::string(FEDCASE_SOURCE_DIR) + "/docs/protocol.md");
  std::set<std::string> known;
  for (Message m : all_messages()) {
    const std::string name = message_name(m);
    known.insert(name);
    INFO("message ", name);
    REQUIRE_MESSAGE(documented.count(name) == 1, "no field table for it");
    std::vector<std::string> docs = documented[name];
    std::sort(docs.begin(), docs.end());
    CHECK_MESSAGE(std::adjacent_find(docs.begin(), docs.end()) == docs.end(),
                  "a field is documented twice");
    docs.erase(std::unique(docs.begin(), docs.end()), docs.end());
    const std::vector<std::string> read = message_fields(m);
    for (const std::string& field : docs) {
      CHECK_MESSAGE(std::binary_search(read.begin(), read.end(), field),
                    "documented but not read: " << field);
    }
    for (const std::string& field : read) {
      CHECK_MESSAGE(std::binary_search(docs.begin(), docs.end(), field),
                    "read but not documented: " << field);
    }
  }
  for (const auto& [name, fields] : documented) {
    CHECK_MESSAGE(known.count(name) == 1, "a field table for no message: " << name);
  }
}

}  // namespace
}  // namespace fedcase::protocol
