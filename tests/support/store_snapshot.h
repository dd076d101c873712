#pragma once
// The rows of every table a request could touch, as one string: a test compares it before and
// after a refused request to show that the request changed nothing. For a SQLite file and for
// a PostgreSQL database (the store of replicas). What moves by itself is left out: a client's
// last contact and its profile (contact statistics, saved every few seconds), leases (renewed);
// admission (the updates, their replicas, each round's count), the partial aggregates and
// upload sessions (their chunks' sizes; a stored chunk is never rewritten) are in.

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <string>
#include <vector>

#include "tests/support/postgres_server.h"

namespace fedcase::testing {

// One SELECT per table, each with an ORDER BY that makes its rows' order unique; SQL that
// SQLite and PostgreSQL both run.
inline const std::vector<std::string>& snapshot_queries() {
  static const std::vector<std::string> queries = {
      "SELECT id, token_hash, info FROM clients ORDER BY id",
      "SELECT id, name, config, state, policy_state FROM jobs ORDER BY id",
      "SELECT job_id, idx, state, selected, metrics, target, admitting, admitted, epoch, plan "
      "FROM rounds ORDER BY job_id, idx",
      "SELECT job_id, round_idx, client_id, meta, replica FROM updates ORDER BY 1, 2, 3",
      "SELECT job_id, version, checksum FROM models ORDER BY 1, 2",
      "SELECT job_id, round_idx, replica, length(sum), weight, updates FROM partials "
      "ORDER BY 1, 2, 3",
      "SELECT job_id, round_idx, id, client_id, bytes, chunk_bytes, sha256, chunks FROM uploads "
      "ORDER BY 1, 2, 3",
      "SELECT job_id, round_idx, upload_id, idx, length(data) FROM upload_chunks "
      "ORDER BY 1, 2, 3, 4"};
  return queries;
}

// Every row of the tables a request could touch in the SQLite file at `path`, as one string.
inline std::string store_snapshot(const std::string& path) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  std::string out;
  for (const std::string& sql : snapshot_queries()) {
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
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

// The same for `database` on `server`, in one query: each table's rows as PostgreSQL writes a
// row value, one a line, in the order of their text (as unique as the rows).
inline std::string store_snapshot(const PostgresServer& server, const std::string& database) {
  std::string sql = "SELECT concat_ws(E'\\n--\\n'";
  for (const std::string& table : snapshot_queries()) {
    sql += ", (SELECT coalesce(string_agg(q::text, E'\\n' ORDER BY q::text), '') FROM (" + table +
           ") q)";
  }
  return server.query(database, sql + ")");
}

}  // namespace fedcase::testing
