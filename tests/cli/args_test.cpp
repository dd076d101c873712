#include "cli/args.h"

#include <doctest/doctest.h>

#include "cli/request.h"

using namespace fedcase;
using namespace fedcase::cli;

namespace {

const std::map<std::string, std::string> kToken = {{"FEDCASE_TOKEN", "env-token"}};

Invocation parse_ok(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& env = kToken) {
  auto inv = parse_args(args, env);
  REQUIRE_MESSAGE(inv.ok(), inv.status().message());
  return std::move(inv).value();
}

std::string parse_error(const std::vector<std::string>& args,
                        const std::map<std::string, std::string>& env = kToken) {
  auto inv = parse_args(args, env);
  REQUIRE(!inv.ok());
  CHECK(inv.status().code() == Code::kInvalidArgument);
  return inv.status().message();
}

}  // namespace

TEST_CASE("subcommands and their arguments") {
  CHECK(parse_ok({"jobs", "list"}).command == Command::kJobsList);
  Invocation create = parse_ok({"jobs", "create", "job.json"});
  CHECK(create.command == Command::kJobsCreate);
  CHECK(create.job_file == "job.json");
  CHECK(parse_ok({"jobs", "create", "-"}).job_file == "-");
  Invocation show = parse_ok({"jobs", "show", "12"});
  CHECK(show.command == Command::kJobsShow);
  CHECK(*show.job == 12);
  CHECK(parse_ok({"jobs", "pause", "1"}).command == Command::kJobsPause);
  CHECK(parse_ok({"jobs", "resume", "1"}).command == Command::kJobsResume);
  CHECK(parse_ok({"jobs", "cancel", "1"}).command == Command::kJobsCancel);
  Invocation clients = parse_ok({"clients"});
  CHECK(clients.command == Command::kClients);
  CHECK(!clients.job);
  CHECK(*parse_ok({"clients", "--job", "3"}).job == 3);
  CHECK(*parse_ok({"--job=4", "clients"}).job == 4);
  Invocation rounds = parse_ok({"rounds", "7", "--json"});
  CHECK(rounds.command == Command::kRounds);
  CHECK(*rounds.job == 7);
  CHECK(rounds.json);
  CHECK(!parse_ok({"jobs", "list"}).json);
  Invocation models = parse_ok({"models", "list", "3"});
  CHECK(models.command == Command::kModelsList);
  CHECK(*models.job == 3);
  Invocation get = parse_ok({"models", "get", "3", "--out", "m.pt"});
  CHECK(get.command == Command::kModelsGet);
  CHECK(get.version == "latest");
  CHECK(get.format == "torchscript");
  CHECK(get.out_file == "m.pt");
  Invocation best = parse_ok({"models", "get", "3", "best", "--format=npz", "--out", "-"});
  CHECK(best.version == "best");
  CHECK(best.format == "npz");
  CHECK(best.out_file == "-");
  CHECK(parse_ok({"models", "get", "3", "0", "--out", "m"}).version == "0");
  CHECK(parse_ok({"models", "get", "3", "12", "--out", "m"}).version == "12");
}

TEST_CASE("models get needs --out, a known format and a version that can name a model") {
  CHECK(parse_error({"models", "get", "3"}).find("needs --out") != std::string::npos);
  CHECK(parse_error({"models", "get", "3", "--out", "m", "--format", "onnx"})
            .find("torchscript, npz or blob") != std::string::npos);
  CHECK(parse_error({"models", "get", "3", "newest", "--out", "m"}).find("'newest'") !=
        std::string::npos);
  CHECK(parse_error({"models", "list", "3", "--out", "m"}).find("goes with 'models get'") !=
        std::string::npos);
  CHECK(parse_error({"jobs", "list", "--format", "npz"}).find("goes with 'models get'") !=
        std::string::npos);
  CHECK(parse_error({"models"}).find("list or get") != std::string::npos);
  CHECK(parse_error({"models", "show", "3"}).find("'models show'") != std::string::npos);
  CHECK(parse_error({"models", "list"}).find("missing an argument") != std::string::npos);
  CHECK(parse_error({"models", "get", "x", "--out", "m"}).find("'x'") != std::string::npos);
}

TEST_CASE("help needs no token and wins over everything else") {
  CHECK(parse_ok({"help"}, {}).command == Command::kHelp);
  CHECK(parse_ok({"--help"}, {}).command == Command::kHelp);
  CHECK(parse_ok({"jobs", "show", "-h"}, {}).command == Command::kHelp);
  CHECK(parse_ok({"bogus", "--help"}, {}).command == Command::kHelp);
  CHECK(usage().find("jobs create FILE") != std::string::npos);
}

TEST_CASE("bad command lines are refused with a message") {
  CHECK(parse_error({}).find("no subcommand") != std::string::npos);
  CHECK(parse_error({"bogus"}).find("unknown subcommand 'bogus'") != std::string::npos);
  CHECK(parse_error({"jobs"}).find("'jobs' needs") != std::string::npos);
  CHECK(parse_error({"jobs", "frob", "1"}).find("'jobs frob'") != std::string::npos);
  CHECK(parse_error({"jobs", "show"}).find("missing an argument") != std::string::npos);
  CHECK(parse_error({"jobs", "list", "extra"}).find("unexpected argument 'extra'") !=
        std::string::npos);
  CHECK(parse_error({"jobs", "show", "abc"}).find("positive whole number") != std::string::npos);
  CHECK(parse_error({"jobs", "show", "0"}).find("positive whole number") != std::string::npos);
  CHECK(parse_error({"rounds", "99999999999999999999"}).find("positive whole number") !=
        std::string::npos);
  CHECK(parse_error({"jobs", "list", "--verbose"}).find("unknown flag '--verbose'") !=
        std::string::npos);
  CHECK(parse_error({"jobs", "list", "--url"}).find("--url needs a value") != std::string::npos);
  CHECK(parse_error({"jobs", "list", "--job", "1"}).find("--job goes with 'clients'") !=
        std::string::npos);
  CHECK(parse_error({"clients", "--job", "x"}).find("positive whole number") != std::string::npos);
  CHECK(parse_error({"jobs", "list", "--timeout", "0"}).find("--timeout") != std::string::npos);
  CHECK(parse_error({"jobs", "list", "--timeout=soon"}).find("--timeout") != std::string::npos);
}

TEST_CASE("the token comes from --token, else FEDCASE_TOKEN, and is required") {
  CHECK(parse_ok({"jobs", "list"}).token == "env-token");
  CHECK(parse_ok({"jobs", "list", "--token", "flag-token"}).token == "flag-token");
  CHECK(parse_ok({"--token=flag-token", "jobs", "list"}).token == "flag-token");
  CHECK(parse_error({"jobs", "list"}, {}).find("no admin token") != std::string::npos);
  CHECK(parse_error({"jobs", "list"}, {{"FEDCASE_TOKEN", ""}}).find("FEDCASE_TOKEN") !=
        std::string::npos);
}

TEST_CASE("the URL comes from --url, else FEDCASE_URL, else the default") {
  Invocation plain = parse_ok({"jobs", "list"});
  CHECK(plain.endpoint.url == kDefaultUrl);
  CHECK(plain.endpoint.host == "127.0.0.1");
  CHECK(plain.endpoint.port == 8080);
  CHECK(!plain.endpoint.tls);
  CHECK(plain.timeout_s == 10);
  std::map<std::string, std::string> env = kToken;
  env["FEDCASE_URL"] = "http://coordinator:9000";
  CHECK(parse_ok({"jobs", "list"}, env).endpoint.host == "coordinator");
  Invocation flagged = parse_ok({"jobs", "list", "--url", "http://10.0.0.2:81/"}, env);
  CHECK(flagged.endpoint.host == "10.0.0.2");
  CHECK(flagged.endpoint.port == 81);
  CHECK(parse_ok({"jobs", "list", "--timeout", "2.5"}).timeout_s == 2.5);
}

TEST_CASE("https needs a CA file, from --ca or FEDCASE_CA; --ca goes only with https") {
  std::map<std::string, std::string> env = kToken;
  env["FEDCASE_URL"] = "https://coord.example:8443";
  CHECK(parse_error({"jobs", "list"}, env).find("--ca FILE or set FEDCASE_CA") !=
        std::string::npos);
  env["FEDCASE_CA"] = "/etc/env-ca.pem";
  Invocation tls = parse_ok({"jobs", "list"}, env);
  CHECK(tls.endpoint.tls);
  CHECK(tls.endpoint.port == 8443);
  CHECK(tls.endpoint.ca_file == "/etc/env-ca.pem");
  CHECK(parse_ok({"jobs", "list", "--ca", "/tmp/flag.pem"}, env).endpoint.ca_file ==
        "/tmp/flag.pem");
  // An environment CA is ignored for a plain URL; a --ca flag is a mistake.
  Invocation plain = parse_ok({"jobs", "list", "--url", "http://127.0.0.1:8080"}, env);
  CHECK(!plain.endpoint.tls);
  CHECK(plain.endpoint.ca_file.empty());
  CHECK(parse_error({"jobs", "list", "--ca", "/tmp/flag.pem"}).find("--ca is for https") !=
        std::string::npos);
}

TEST_CASE("URLs") {
  auto url = [](const std::string& text) {
    auto e = parse_url(text);
    REQUIRE_MESSAGE(e.ok(), e.status().message());
    return std::move(e).value();
  };
  CHECK(url("http://example.org").port == 80);
  CHECK(url("https://example.org").port == 443);
  CHECK(url("https://example.org").tls);
  CHECK(url("http://[::1]:8080").host == "::1");
  CHECK(url("http://[::1]:8080").port == 8080);
  for (const char* bad :
       {"ftp://x", "127.0.0.1:8080", "http://", "http://:80", "http://h:", "http://h:0",
        "http://h:65536", "http://h:8x", "http://h:80/v1", "http://[::1", "http://[::1]x"}) {
    CAPTURE(bad);
    CHECK(!parse_url(bad).ok());
  }
}

TEST_CASE("the request each subcommand makes") {
  auto request = [](const std::vector<std::string>& args, const std::string& body = {}) {
    return api_request(parse_ok(args), body);
  };
  ApiRequest list = request({"jobs", "list"});
  CHECK(list.method == "GET");
  CHECK(list.target == "/v1/admin/jobs");
  CHECK(list.body.empty());
  CHECK(list.headers.at("Authorization") == "Bearer env-token");
  CHECK(list.headers.count("Content-Type") == 0);
  ApiRequest create = request({"jobs", "create", "f.json"}, R"({"name":"x"})");
  CHECK(create.method == "POST");
  CHECK(create.target == "/v1/admin/jobs");
  CHECK(create.body == R"({"name":"x"})");
  CHECK(create.headers.at("Content-Type") == "application/json");
  CHECK(request({"jobs", "show", "3"}).target == "/v1/admin/jobs/3");
  CHECK(request({"rounds", "3"}).target == "/v1/admin/jobs/3");
  for (const char* action : {"pause", "resume", "cancel"}) {
    ApiRequest control = request({"jobs", action, "5"});
    CHECK(control.method == "POST");
    CHECK(control.target == std::string("/v1/admin/jobs/5/") + action);
  }
  CHECK(request({"clients", "--job", "2"}).target == "/v1/admin/clients");
  CHECK(request({"models", "list", "4"}).target == "/v1/admin/jobs/4/models");
  ApiRequest get = request({"models", "get", "4", "best", "--format", "npz", "--out", "m.npz"});
  CHECK(get.method == "GET");
  CHECK(get.target == "/v1/admin/jobs/4/models/best/export?format=npz");
  CHECK(get.headers.at("Accept") == "application/octet-stream");
}

TEST_CASE("jobs create --model sends the config and the model file as multipart form data") {
  Invocation inv = parse_ok({"jobs", "create", "job.json", "--model", "model.pt"});
  CHECK(inv.model_file == "model.pt");
  CHECK(parse_error({"jobs", "list", "--model", "m.pt"}).find("--model goes with 'jobs create'") !=
        std::string::npos);

  // A model whose bytes hold the default boundary gets a longer one.
  const std::string model = std::string("\0\x01zip--fedcase-job-boundary\r\n", 31);
  ApiRequest r = api_request(inv, R"({"model":"torchscript"})", model);
  CHECK(r.method == "POST");
  CHECK(r.target == "/v1/admin/jobs");
  const std::string type = r.headers.at("Content-Type");
  REQUIRE(type.rfind("multipart/form-data; boundary=", 0) == 0);
  const std::string boundary = type.substr(type.find('=') + 1);
  CHECK(model.find(boundary) == std::string::npos);
  CHECK(r.body == "--" + boundary + "\r\n" +
                      "Content-Disposition: form-data; name=\"config\"; filename=\"job.json\"\r\n"
                      "Content-Type: application/json\r\n\r\n"
                      R"({"model":"torchscript"})"
                      "\r\n--" +
                      boundary + "\r\n" +
                      "Content-Disposition: form-data; name=\"model\"; filename=\"model\"\r\n"
                      "Content-Type: application/octet-stream\r\n\r\n" +
                      model + "\r\n--" + boundary + "--\r\n");
}
