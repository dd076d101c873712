// The `fedcase` binary (FEDCASE_CLI_BIN) against a live coordinator with a small fleet: every
// subcommand, its --json output against the admin API's answer, and the exit codes of errors.

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "cli/exit_codes.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/test_certificates.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

extern char** environ;

namespace {

struct Run {
  int exit_code = -1;
  std::string out, err;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs the CLI with `args`, `env` (the FEDCASE_* variables; others are inherited, FEDCASE_*
// ones are not) and `input` on standard input; output goes through files in `dir`.
Run fedcase_cli(const TempDir& dir, const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env = {}, const std::string& input = "") {
  const std::string in_path = dir.file("cli.in"), out_path = dir.file("cli.out"),
                    err_path = dir.file("cli.err");
  std::ofstream(in_path) << input;
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    if (std::string(*e).rfind("FEDCASE_", 0) != 0) env_strings.emplace_back(*e);
  }
  for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
  std::vector<char*> argv{const_cast<char*>(FEDCASE_CLI_BIN)}, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(open(in_path.c_str(), O_RDONLY), STDIN_FILENO);
    dup2(open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), STDOUT_FILENO);
    dup2(open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), STDERR_FILENO);
    execve(FEDCASE_CLI_BIN, argv.data(), envp.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Run run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = read_all(out_path);
  run.err = read_all(err_path);
  return run;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Checks that `text` has `lines` lines and each of `parts`.
void check_table(const std::string& text, size_t lines, const std::vector<std::string>& parts) {
  CHECK_MESSAGE(size_t(std::count(text.begin(), text.end(), '\n')) == lines, text);
  for (const std::string& part : parts) CHECK_MESSAGE(has(text, part), part << " in\n" << text);
}

std::vector<uint64_t> ids(const json& list, const char* array, const char* key) {
  std::vector<uint64_t> out;
  for (const json& item : list.at(array)) out.push_back(item.at(key).get<uint64_t>());
  return out;
}

}  // namespace

TEST_CASE("every subcommand of the fedcase CLI against a live coordinator") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  const std::map<std::string, std::string> env = {{"FEDCASE_URL", url},
                                                  {"FEDCASE_TOKEN", kAdminToken}};
  auto cli = [&](const std::vector<std::string>& args, const std::string& input = "") {
    return fedcase_cli(dir, args, env, input);
  };
  // The output of a call that must succeed: its table, or with --json its JSON.
  auto cli_table = [&](const std::vector<std::string>& args) {
    Run run = cli(args);
    CHECK_MESSAGE(run.exit_code == cli::kExitOk, run.err);
    return run.out;
  };
  auto cli_json = [&](std::vector<std::string> args, const std::string& input = "") {
    args.push_back("--json");
    Run run = cli(args, input);
    CHECK_MESSAGE(run.exit_code == cli::kExitOk, run.err);
    return json::parse(run.out);
  };
  Caller admin(port, kAdminToken);

  // jobs create FILE: a two-round job the fleet finishes.
  const json short_job = {
      {"name", "cli-short"},
      {"model", "mlp"},
      {"rounds", 2},
      {"clients_per_round", 3},
      {"selection", {{"overcommit", 1.0}}},
      {"training", {{"lr", 0.05}, {"deadline", {{"mode", "fixed"}, {"seconds", 60}}}}}};
  std::ofstream(dir.file("short.json")) << short_job.dump();
  Run created = cli({"jobs", "create", dir.file("short.json")});
  REQUIRE(created.exit_code == cli::kExitOk);
  CHECK(created.out.rfind("created job 1 \"cli-short\": running, round ", 0) == 0);

  ml::Dataset slice = ml::head(fmnist_train(), 1500);
  auto fleet = client::Fleet::start(test_fleet(port, 3, slice));
  REQUIRE(fleet.ok());
  json detail;
  const bool finished = wait_until(
      [&] {
        detail = admin.get("/v1/admin/jobs/1").body;
        auto rounds = committed_rounds(detail);
        return detail.value("state", "") == "finished" && rounds.size() == 2 &&
               rounds.back()["metrics"].contains("test_accuracy");
      },
      40);
  REQUIRE_MESSAGE(finished, detail.dump());

  // jobs create - (standard input) with --json: a long job to pause, resume and cancel.
  json long_job = short_job;
  long_job["name"] = "cli-long";
  long_job["rounds"] = 1000;
  const json second = cli_json({"jobs", "create", "-"}, long_job.dump());
  CHECK(second["job_id"] == 2);
  CHECK(second["name"] == "cli-long");

  {  // jobs list, show and rounds
    check_table(cli_table({"jobs", "list"}), 3,
                {"ID  NAME       STATE", "cli-short  finished", "cli-long   running"});
    CHECK(ids(cli_json({"jobs", "list"}), "jobs", "job_id") ==
          ids(admin.get("/v1/admin/jobs").body, "jobs", "job_id"));

    check_table(cli_table({"jobs", "show", "1"}), 8,
                {"job 1 \"cli-short\"\nstate             finished\n", "model             mlp, ",
                 "rounds            2 (2 committed)"});
    CHECK(cli_json({"jobs", "show", "1"}) == admin.get("/v1/admin/jobs/1").body);

    check_table(
        cli_table({"rounds", "1"}), 3,
        {"ROUND  STATE      SELECTED  UPDATES  DROPPED", "1      committed  3         3        0",
         "2      committed  3         3        0"});
    CHECK(cli_json({"rounds", "1"}) == admin.get("/v1/admin/jobs/1").body["rounds"]);
  }

  {  // clients, for every job and for one
    check_table(cli_table({"clients"}), 4, {"ID  AVAILABLE  LAST SEEN", "ms/sample", " ago "});
    CHECK(ids(cli_json({"clients"}), "clients", "client_id") ==
          ids(admin.get("/v1/admin/clients").body, "clients", "client_id"));
    // The finished job plans no more tasks; the running one expects a duration of each client.
    check_table(cli_table({"clients", "--job", "1"}), 1, {"ID  AVAILABLE"});
    const json running = cli_json({"clients", "--job", "2"});
    CHECK(running["clients"].size() == 3);
    for (const json& c : running["clients"]) CHECK(c["expected_duration_s"].contains("2"));
    check_table(cli_table({"clients", "--job=2"}), 4, {"s ago "});
  }

  {  // models list and get: the versions, and a version saved to a file or standard output
    check_table(cli_table({"models", "list", "1"}), 5,
                {"job 1: latest version 2, best ", "VERSION", "2 latest", "0 "});
    CHECK(cli_json({"models", "list", "1"}) == admin.get("/v1/admin/jobs/1/models").body);
    Run saved = cli({"models", "get", "1", "--format", "npz", "--out", dir.file("m.npz")});
    CHECK_MESSAGE(saved.exit_code == cli::kExitOk, saved.err);
    const std::string npz = admin.get("/v1/admin/jobs/1/models/2/export?format=npz").raw;
    CHECK(read_all(dir.file("m.npz")) == npz);
    CHECK(has(saved.out, "job 1 model version 2 as npz: "));
    CHECK(has(saved.out, "to " + dir.file("m.npz")));
    Run piped = cli({"models", "get", "1", "1", "--format=blob", "--out", "-"});
    CHECK(piped.exit_code == cli::kExitOk);
    CHECK(piped.out == admin.get("/v1/jobs/1/models/1").raw);
    CHECK(has(piped.err, "job 1 model version 1 as blob"));
    Run script = cli({"models", "get", "1", "best", "--out", dir.file("m.pt")});
    CHECK(script.exit_code == cli::kExitOk);
    CHECK(read_all(dir.file("m.pt")).rfind("PK", 0) == 0);  // a TorchScript zip archive
    Run missing = cli({"models", "get", "1", "9", "--out", dir.file("none")});
    CHECK(missing.exit_code == cli::kExitNotFound);
    CHECK(has(missing.err, "job 1 has no model version 9"));
    CHECK_FALSE(std::ifstream(dir.file("none")).good());  // nothing written
  }

  {  // pause, resume, cancel, and what a cancelled job refuses
    Run paused = cli({"jobs", "pause", "2"});
    CHECK(paused.exit_code == cli::kExitOk);
    CHECK(paused.out == "job 2 is paused\n");
    CHECK(cli_json({"jobs", "resume", "2"}) == json{{"job_id", 2}, {"state", "running"}});
    Run cancelled = cli({"jobs", "cancel", "2"});
    CHECK(cancelled.exit_code == cli::kExitOk);
    CHECK(cancelled.out == "job 2 is cancelled\n");
    Run refused = cli({"jobs", "pause", "2"});
    CHECK(refused.exit_code == cli::kExitRefused);
    CHECK(refused.out.empty());
    CHECK(has(refused.err, "cannot pause a job that is cancelled (HTTP 409)"));
  }

  {  // errors and their exit codes
    Run wrong_token = cli({"jobs", "list", "--token", "not-the-admin-token"});
    CHECK(wrong_token.exit_code == cli::kExitAuth);
    CHECK(has(wrong_token.err, "the coordinator did not accept the token"));
    Run unknown = cli({"jobs", "show", "99"});
    CHECK(unknown.exit_code == cli::kExitNotFound);
    CHECK(has(unknown.err, "job 99 not found"));
    CHECK(cli({"rounds", "99"}).exit_code == cli::kExitNotFound);

    const json bad_job = {{"name", "bad"}, {"model", "no-such-model"}};
    const std::string server_message =
        admin.post("/v1/admin/jobs", bad_job).body["error"]["message"].get<std::string>();
    std::ofstream(dir.file("bad.json")) << bad_job.dump();
    Run bad = cli({"jobs", "create", dir.file("bad.json")});
    CHECK(bad.exit_code == cli::kExitRefused);
    CHECK(has(bad.err, server_message));
    CHECK(has(bad.err, "(HTTP 400)"));
    Run not_json = cli({"jobs", "create", "-"}, "{not json");
    CHECK(not_json.exit_code == cli::kExitRefused);
    CHECK(has(not_json.err, "request body"));
    Run no_file = cli({"jobs", "create", dir.file("missing.json")});
    CHECK(no_file.exit_code == cli::kExitUsage);
    CHECK(has(no_file.err, "cannot read the job file"));

    // A flag beats the environment: an unreachable URL, then a missing token.
    Run down = cli({"jobs", "list", "--url", "http://127.0.0.1:1", "--timeout", "2"});
    CHECK(down.exit_code == cli::kExitUnreachable);
    CHECK(has(down.err, "cannot reach the coordinator at http://127.0.0.1:1"));
    CHECK(has(down.err, "coordinator is running"));
    Run no_token = fedcase_cli(dir, {"jobs", "list"}, {{"FEDCASE_URL", url}});
    CHECK(no_token.exit_code == cli::kExitUsage);
    CHECK(has(no_token.err, "no admin token"));
    Run flag_token = fedcase_cli(dir, {"jobs", "list", "--url", url, "--token", kAdminToken});
    CHECK(flag_token.exit_code == cli::kExitOk);

    Run bad_usage = cli({"jobs", "frob", "1"});
    CHECK(bad_usage.exit_code == cli::kExitUsage);
    CHECK(has(bad_usage.err, "run 'fedcase help' for usage"));
    CHECK(cli({"--bogus"}).exit_code == cli::kExitUsage);
    CHECK(fedcase_cli(dir, {}).exit_code == cli::kExitUsage);
    Run help = fedcase_cli(dir, {"help"});
    CHECK(help.exit_code == cli::kExitOk);
    CHECK(has(help.out, "usage: fedcase"));
    CHECK(fedcase_cli(dir, {"--help"}).out == help.out);
  }
  (*fleet)->stop();
}

TEST_CASE("the fedcase CLI over TLS: the CA from --ca or FEDCASE_CA, and what fails") {
  TempDir dir;
  TestCertificates certs(dir);
  auto service = start_coordinator(dir, serving_tls(certs.server_cert, certs.server_key));
  const std::string url = "https://127.0.0.1:" + std::to_string(service->port());
  const std::map<std::string, std::string> env = {{"FEDCASE_URL", url},
                                                  {"FEDCASE_TOKEN", kAdminToken}};
  Run by_flag = fedcase_cli(dir, {"jobs", "list", "--ca", certs.ca}, env);
  CHECK_MESSAGE(by_flag.exit_code == cli::kExitOk, by_flag.err);
  CHECK(has(by_flag.out, "ID  NAME"));
  std::map<std::string, std::string> with_ca = env;
  with_ca["FEDCASE_CA"] = certs.ca;
  CHECK(fedcase_cli(dir, {"jobs", "list"}, with_ca).exit_code == cli::kExitOk);

  Run untrusted = fedcase_cli(dir, {"jobs", "list", "--ca", certs.other_ca}, env);
  CHECK(untrusted.exit_code == cli::kExitUnreachable);
  CHECK(has(untrusted.err, "certificate verify failed"));
  Run no_ca_file = fedcase_cli(dir, {"jobs", "list", "--ca", dir.file("missing.pem")}, env);
  CHECK(no_ca_file.exit_code == cli::kExitUnreachable);
  CHECK(has(no_ca_file.err, "CA file"));
  Run no_ca = fedcase_cli(dir, {"jobs", "list"}, env);
  CHECK(no_ca.exit_code == cli::kExitUsage);
  CHECK(has(no_ca.err, "--ca FILE or set FEDCASE_CA"));
}
