#pragma once
// The rows of every table a request could touch, as one string: a test compares it before and
// after a refused request to show that the request changed nothing.

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <string>

namespace fedcase::testing {

// Every row of the tables a request could touch, as one string.
inline std::string store_snapshot(const std::string& path) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  std::string out;
  for (const char* sql :
       {"SELECT id, token_hash, info FROM clients ORDER BY id",
        "SELECT id, name, config, state, policy_state FROM jobs ORDER BY id",
        "SELECT job_id, idx, state, selected, metrics FROM rounds ORDER BY job_id, idx",
        "SELECT job_id, round_idx, client_id, meta FROM updates ORDER BY 1, 2, 3",
        "SELECT job_id, version, checksum FROM models ORDER BY 1, 2"}) {
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) == SQLITE_OK);
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
        const unsigned char* text = sqlite3_column_text(stmt, c);
        out += text ? reinterpret_cast<const char*>(text) : "NULL";
        out += '|';
      }
      out += '\n';
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return out;
}

}  // namespace fedcase::testing
