#include "cli/reply.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "cli/exit_codes.h"
#include "common/crypto.h"

using namespace fedcase;
using namespace fedcase::cli;
using nlohmann::json;

namespace {

Invocation invocation(Command command, bool json_output = false) {
  Invocation inv;
  inv.command = command;
  inv.json = json_output;
  inv.endpoint.url = "http://127.0.0.1:9";
  return inv;
}

std::string error_body(const std::string& code, const std::string& message) {
  return json{{"error", {{"code", code}, {"message", message}}}}.dump();
}

}  // namespace

TEST_CASE("HTTP statuses map onto the documented exit codes") {
  CHECK(exit_code_for_http(200) == kExitOk);
  CHECK(exit_code_for_http(201) == kExitOk);
  CHECK(exit_code_for_http(401) == kExitAuth);
  CHECK(exit_code_for_http(403) == kExitAuth);
  CHECK(exit_code_for_http(404) == kExitNotFound);
  for (int status : {400, 405, 409, 413, 422, 429})
    CHECK(exit_code_for_http(status) == kExitRefused);
  for (int status : {500, 503, 302, 100}) CHECK(exit_code_for_http(status) == kExitServerError);
}

TEST_CASE("errors print the server's message with what it means") {
  const Invocation inv = invocation(Command::kJobsPause);
  Outcome unauthenticated =
      interpret_reply(inv, 401, error_body("unauthenticated", "unknown token"), 0);
  CHECK(unauthenticated.exit_code == kExitAuth);
  CHECK(unauthenticated.out.empty());
  CHECK(unauthenticated.err.find("did not accept the token") != std::string::npos);
  CHECK(interpret_reply(inv, 403, error_body("permission_denied", "no"), 0)
            .err.find("may not do this") != std::string::npos);
  Outcome missing = interpret_reply(inv, 404, error_body("not_found", "job 9 not found"), 0);
  CHECK(missing.exit_code == kExitNotFound);
  CHECK(missing.err == "fedcase: job 9 not found (HTTP 404)\n");
  Outcome conflict =
      interpret_reply(inv, 409, error_body("conflict", "cannot pause a job that is cancelled"), 0);
  CHECK(conflict.exit_code == kExitRefused);
  CHECK(conflict.err.find("cannot pause a job that is cancelled") != std::string::npos);
  Outcome failed = interpret_reply(inv, 500, error_body("internal", "internal error"), 0);
  CHECK(failed.exit_code == kExitServerError);
  CHECK(failed.err.find("the coordinator failed (HTTP 500): internal error") != std::string::npos);
  // An error that is not the coordinator's JSON still shows what came back.
  CHECK(interpret_reply(inv, 502, "Bad Gateway", 0).err.find("Bad Gateway") != std::string::npos);
  CHECK(interpret_reply(inv, 503, "", 0).err.find("no details") != std::string::npos);
}

TEST_CASE("a success prints the view, or the JSON with --json") {
  const json state = {{"job_id", 4}, {"state", "paused"}};
  Outcome table = interpret_reply(invocation(Command::kJobsPause), 200, state.dump(), 0);
  CHECK(table.exit_code == kExitOk);
  CHECK(table.out == "job 4 is paused\n");
  CHECK(table.err.empty());
  Outcome raw = interpret_reply(invocation(Command::kJobsPause, true), 200, state.dump(), 0);
  CHECK(json::parse(raw.out) == state);

  const json detail = {{"rounds", {{{"round", 1}}}}};
  CHECK(
      json::parse(interpret_reply(invocation(Command::kRounds, true), 200, detail.dump(), 0).out) ==
      detail["rounds"]);

  Invocation for_job = invocation(Command::kClients, true);
  for_job.job = 2;
  const json clients = {{"clients",
                         {{{"client_id", 1}, {"expected_duration_s", {{"2", 1.0}}}},
                          {{"client_id", 2}, {"expected_duration_s", json::object()}}}}};
  const json kept = json::parse(interpret_reply(for_job, 200, clients.dump(), 0).out);
  REQUIRE(kept["clients"].size() == 1);
  CHECK(kept["clients"][0]["client_id"] == 1);
}

TEST_CASE("an unreadable answer is a server error") {
  Outcome not_json = interpret_reply(invocation(Command::kJobsList), 200, "<html>", 0);
  CHECK(not_json.exit_code == kExitServerError);
  CHECK(not_json.err.find("not JSON") != std::string::npos);
  Outcome wrong_shape = interpret_reply(invocation(Command::kJobsList), 200, "{\"jobs\": 3}", 0);
  CHECK(wrong_shape.exit_code == kExitServerError);
  CHECK(wrong_shape.err.find("unexpected shape") != std::string::npos);
}

TEST_CASE("usage and transport failures") {
  Outcome usage = usage_failure(invalid_argument("unknown flag '--x'"));
  CHECK(usage.exit_code == kExitUsage);
  CHECK(usage.err == "fedcase: unknown flag '--x'\nrun 'fedcase help' for usage\n");
  Outcome down =
      transport_failure(invocation(Command::kJobsList),
                        unavailable("cannot connect to 127.0.0.1:9: Connection refused"));
  CHECK(down.exit_code == kExitUnreachable);
  CHECK(down.err.find("http://127.0.0.1:9") != std::string::npos);
  CHECK(down.err.find("Connection refused") != std::string::npos);
  CHECK(down.err.find("coordinator is running") != std::string::npos);
}

TEST_CASE("a downloaded export is checked against its checksum before it is written") {
  Invocation inv = invocation(Command::kModelsGet);
  inv.job = 3;
  inv.out_file = "model.pt";
  const std::string bytes = "model bytes";
  const std::string etag = "\"" + sha256_hex(bytes) + "\"";
  Outcome saved = interpret_export(inv, 200, bytes, etag, "12");
  CHECK(saved.exit_code == kExitOk);
  CHECK(saved.out == "job 3 model version 12 as torchscript: 11 B to model.pt, sha256 " +
                         sha256_hex(bytes) + "\n");
  Outcome corrupt = interpret_export(inv, 200, bytes + "!", etag, "12");
  CHECK(corrupt.exit_code == kExitServerError);
  CHECK(corrupt.err.find("corrupt") != std::string::npos);
  CHECK(interpret_export(inv, 200, bytes, "", "12").exit_code == kExitServerError);
  Outcome missing =
      interpret_export(inv, 404, error_body("not_found", "job 3 has no model version 12"), "", "");
  CHECK(missing.exit_code == kExitNotFound);
  CHECK(missing.err == "fedcase: job 3 has no model version 12 (HTTP 404)\n");
}
