#include "cli/args.h"

#include <cmath>
#include <cstdlib>

namespace fedcase::cli {

namespace {

// A whole decimal number in [1, max], or nothing.
std::optional<uint64_t> parse_positive(const std::string& text, uint64_t max) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = uint64_t(c - '0');
    if (value > (max - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  if (value == 0) return std::nullopt;
  return value;
}

Result<uint64_t> parse_job_id(const std::string& text) {
  auto id = parse_positive(text, UINT64_MAX);
  if (!id) return invalid_argument("a job id is a positive whole number, not '" + text + "'");
  return *id;
}

// A model version: a whole decimal number, 0 included.
bool is_version_number(const std::string& text) {
  return text == "0" || parse_positive(text, UINT64_MAX).has_value();
}

std::string lookup(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

// The flags that take a value; the others are --json and --help / -h.
bool takes_value(const std::string& flag) {
  return flag == "--url" || flag == "--token" || flag == "--ca" || flag == "--timeout" ||
         flag == "--job" || flag == "--model" || flag == "--format" || flag == "--out";
}

// The subcommand and its arguments, from the words that are not flags.
Status parse_command(const std::vector<std::string>& words, Invocation& inv) {
  if (words.empty()) return invalid_argument("no subcommand given");
  auto expect_words = [&](size_t n, const std::string& form) -> Status {
    if (words.size() < n) return invalid_argument("'" + form + "' is missing an argument");
    if (words.size() > n) return invalid_argument("unexpected argument '" + words[n] + "'");
    return ok_status();
  };
  auto job_argument = [&](Command command, const std::string& form) -> Status {
    FEDCASE_RETURN_IF_ERROR(expect_words(words[0] == "jobs" ? 3 : 2, form));
    auto id = parse_job_id(words.back());
    if (!id.ok()) return id.status();
    inv.command = command;
    inv.job = *id;
    return ok_status();
  };
  const std::string& group = words[0];
  if (group == "clients") {
    FEDCASE_RETURN_IF_ERROR(expect_words(1, "clients"));
    inv.command = Command::kClients;
    return ok_status();
  }
  if (group == "rounds") return job_argument(Command::kRounds, "rounds ID");
  if (group == "models") {
    if (words.size() < 2) return invalid_argument("'models' needs list or get");
    if (words[1] == "list") {
      FEDCASE_RETURN_IF_ERROR(expect_words(3, "models list ID"));
    } else if (words[1] == "get") {
      if (words.size() == 4) {
        const std::string& version = words[3];
        if (version != "latest" && version != "best" && !is_version_number(version)) {
          return invalid_argument("a model version is a number, 'latest' or 'best', not '" +
                                  version + "'");
        }
        inv.version = version;
      } else {
        FEDCASE_RETURN_IF_ERROR(expect_words(3, "models get ID [VERSION]"));
      }
    } else {
      return invalid_argument("unknown subcommand 'models " + words[1] + "'");
    }
    auto id = parse_job_id(words[2]);
    if (!id.ok()) return id.status();
    inv.command = words[1] == "list" ? Command::kModelsList : Command::kModelsGet;
    inv.job = *id;
    return ok_status();
  }
  if (group != "jobs") return invalid_argument("unknown subcommand '" + group + "'");
  if (words.size() < 2)
    return invalid_argument("'jobs' needs list, create, show, pause, resume or cancel");
  const std::string& action = words[1];
  if (action == "list") {
    FEDCASE_RETURN_IF_ERROR(expect_words(2, "jobs list"));
    inv.command = Command::kJobsList;
    return ok_status();
  }
  if (action == "create") {
    FEDCASE_RETURN_IF_ERROR(expect_words(3, "jobs create FILE"));
    inv.command = Command::kJobsCreate;
    inv.job_file = words[2];
    return ok_status();
  }
  if (action == "show") return job_argument(Command::kJobsShow, "jobs show ID");
  if (action == "pause") return job_argument(Command::kJobsPause, "jobs pause ID");
  if (action == "resume") return job_argument(Command::kJobsResume, "jobs resume ID");
  if (action == "cancel") return job_argument(Command::kJobsCancel, "jobs cancel ID");
  return invalid_argument("unknown subcommand 'jobs " + action + "'");
}

}  // namespace

Result<Endpoint> parse_url(const std::string& url) {
  Endpoint e;
  e.url = url;
  std::string rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    rest = url.substr(8);
    e.tls = true;
  } else {
    return invalid_argument("the URL must start with http:// or https://, not '" + url + "'");
  }
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) {
    return invalid_argument(
        "the URL names only the coordinator (scheme, host, port), not a path: '" + url + "'");
  }
  std::string port_text;
  if (!rest.empty() && rest.front() == '[') {  // [IPv6]:port
    const size_t close = rest.find(']');
    if (close == std::string::npos)
      return invalid_argument("unclosed '[' in the URL '" + url + "'");
    e.host = rest.substr(1, close - 1);
    const std::string after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return invalid_argument("bad port in the URL '" + url + "'");
      port_text = after.substr(1);
      if (port_text.empty()) return invalid_argument("bad port in the URL '" + url + "'");
    }
  } else {
    const size_t colon = rest.find(':');
    e.host = rest.substr(0, colon);
    if (colon != std::string::npos) {
      port_text = rest.substr(colon + 1);
      if (port_text.empty()) return invalid_argument("bad port in the URL '" + url + "'");
    }
  }
  if (e.host.empty()) return invalid_argument("no host in the URL '" + url + "'");
  if (port_text.empty()) {
    e.port = e.tls ? 443 : 80;
  } else {
    auto port = parse_positive(port_text, 65535);
    if (!port) return invalid_argument("bad port in the URL '" + url + "'");
    e.port = uint16_t(*port);
  }
  return e;
}

Result<Invocation> parse_args(const std::vector<std::string>& args,
                              const std::map<std::string, std::string>& env) {
  Invocation inv;
  std::vector<std::string> words;
  std::map<std::string, std::string> flags;  // value flags as given
  bool help = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h" || arg == "help") {
      help = true;
    } else if (arg == "--json") {
      inv.json = true;
    } else if (arg.size() > 1 && arg[0] == '-') {
      const size_t eq = arg.find('=');
      const std::string flag = arg.substr(0, eq);
      if (!takes_value(flag)) return invalid_argument("unknown flag '" + flag + "'");
      if (eq != std::string::npos) {
        flags[flag] = arg.substr(eq + 1);
      } else {
        if (i + 1 >= args.size()) return invalid_argument(flag + " needs a value");
        flags[flag] = args[++i];
      }
    } else {
      words.push_back(arg);
    }
  }
  if (help) {
    inv.command = Command::kHelp;
    return inv;
  }
  FEDCASE_RETURN_IF_ERROR(parse_command(words, inv));

  if (auto job = flags.find("--job"); job != flags.end()) {
    if (inv.command != Command::kClients) return invalid_argument("--job goes with 'clients'");
    auto id = parse_job_id(job->second);
    if (!id.ok()) return id.status();
    inv.job = *id;
  }
  if (auto model = flags.find("--model"); model != flags.end()) {
    if (inv.command != Command::kJobsCreate)
      return invalid_argument("--model goes with 'jobs create'");
    if (model->second.empty()) return invalid_argument("--model needs a file");
    if (model->second == "-" && inv.job_file == "-") {
      return invalid_argument("the job file and --model cannot both be standard input");
    }
    inv.model_file = model->second;
  }
  for (const char* flag : {"--format", "--out"}) {
    if (flags.count(flag) && inv.command != Command::kModelsGet) {
      return invalid_argument(std::string(flag) + " goes with 'models get'");
    }
  }
  if (inv.command == Command::kModelsGet) {
    if (auto format = flags.find("--format"); format != flags.end()) inv.format = format->second;
    if (inv.format != "torchscript" && inv.format != "npz" && inv.format != "blob") {
      return invalid_argument("--format is torchscript, npz or blob, not '" + inv.format + "'");
    }
    auto out = flags.find("--out");
    if (out == flags.end() || out->second.empty()) {
      return invalid_argument("'models get' needs --out FILE ('-': standard output)");
    }
    inv.out_file = out->second;
  }
  if (auto timeout = flags.find("--timeout"); timeout != flags.end()) {
    const std::string& text = timeout->second;
    char* end = nullptr;
    inv.timeout_s = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(inv.timeout_s) || inv.timeout_s <= 0) {
      return invalid_argument("--timeout takes a positive number of seconds, not '" + text + "'");
    }
  }

  inv.token = flags.count("--token") ? flags["--token"] : lookup(env, "FEDCASE_TOKEN");
  if (inv.token.empty()) {
    return invalid_argument("no admin token: pass --token TOKEN or set FEDCASE_TOKEN");
  }

  std::string url = flags.count("--url") ? flags["--url"] : lookup(env, "FEDCASE_URL");
  if (url.empty()) url = kDefaultUrl;
  auto endpoint = parse_url(url);
  if (!endpoint.ok()) return endpoint.status();
  inv.endpoint = std::move(endpoint).value();
  const bool ca_flag = flags.count("--ca") > 0;
  const std::string ca = ca_flag ? flags["--ca"] : lookup(env, "FEDCASE_CA");
  if (inv.endpoint.tls) {
    if (ca.empty()) {
      return invalid_argument(
          "an https URL needs the CA certificate that signed the coordinator's certificate: "
          "pass --ca FILE or set FEDCASE_CA");
    }
    inv.endpoint.ca_file = ca;
  } else if (ca_flag) {
    return invalid_argument("--ca is for https URLs; '" + url + "' is plain http");
  }
  return inv;
}

std::string usage() {
  return "usage: fedcase [flags] SUBCOMMAND\n"
         "\n"
         "subcommands:\n"
         "  jobs list               the jobs: id, name, state, round, model version, accuracy\n"
         "  jobs create FILE [--model MODEL]\n"
         "                          create a job from a JSON job config (FILE '-': stdin);\n"
         "                          MODEL: the job's TorchScript module or model blob file\n"
         "  jobs show ID            one job: state, policy, aggregation, rounds, result\n"
         "  jobs pause ID           finish the current round, open no new one\n"
         "  jobs resume ID          open rounds again\n"
         "  jobs cancel ID          fail the current round and stop the job\n"
         "  clients [--job ID]      the registered clients and their profiles; with --job,\n"
         "                          only those with an expected duration for that job\n"
         "  rounds ID               the rounds of a job and their metrics\n"
         "  models list ID          a job's model versions: round, accuracy, size\n"
         "  models get ID [VERSION] --out FILE [--format F]\n"
         "                          download a model version (a number, latest or best;\n"
         "                          default latest) as F: torchscript (default), npz or\n"
         "                          blob; FILE '-': standard output\n"
         "  help                    this text\n"
         "\n"
         "flags:\n"
         "  --url URL      the coordinator, http://host:port or https://host:port\n"
         "                 (env FEDCASE_URL, default " +
         std::string(kDefaultUrl) +
         ")\n"
         "  --token TOKEN  the admin token (env FEDCASE_TOKEN; required)\n"
         "  --ca FILE      CA certificate for an https URL (env FEDCASE_CA)\n"
         "  --timeout S    seconds to wait for the coordinator (default 10)\n"
         "  --json         print the coordinator's JSON instead of a table\n"
         "  -h, --help     this text\n"
         "\n"
         "exit codes: 0 ok, 2 usage, 3 coordinator unreachable or TLS failed,\n"
         "            4 token refused (401/403), 5 not found (404),\n"
         "            6 request refused (other 4xx), 7 server error or unreadable answer\n";
}

}  // namespace fedcase::cli
