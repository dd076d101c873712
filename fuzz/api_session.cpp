#include "fuzz/api_session.h"

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/blob.h"
#include "fuzz/fuzz_target.h"
#include "storage/store.h"
#include "tests/support/temp_dir.h"

namespace fedcase::fuzz {
namespace {

namespace http = boost::beast::http;
using nlohmann::json;

constexpr double kStartTime = 1000;
constexpr size_t kHeaderLimit = 16 * 1024;  // as server/http_server.cpp
constexpr JobId kJob = 1;

[[noreturn]] void setup_failed(const Status& status) {
  std::fprintf(stderr, "fuzz setup failed: %s\n", status.to_string().c_str());
  std::abort();
}

template <class T>
T must(Result<T> result) {
  if (!result.ok()) setup_failed(result.status());
  return std::move(result).value();
}

server::CoordinatorConfig config_for(const std::string& database) {
  return server::parse_coordinator_config(
      {{"database", database},
       {"admin_token", ApiSession::token(Token::kAdmin)},
       {"enrollment_token", ApiSession::token(Token::kEnrollment)},
       {"requests_per_second", 1e6}});
}

std::unique_ptr<server::Coordinator> open_coordinator(
    const std::string& database, std::unique_ptr<server::ModelEvaluator> evaluator,
    server::Clock clock) {
  auto store = must(storage::open_sqlite_store(database));
  return must(server::Coordinator::open(config_for(database), std::move(store),
                                        std::move(evaluator), std::move(clock)));
}

}  // namespace

// Scores every model 0.5, when run() is called (or at destruction): done runs later than
// submit, as with the real evaluator, but on the session's thread.
class DeferredEvaluator final : public server::ModelEvaluator {
 public:
  ~DeferredEvaluator() override { run(); }
  void submit(const server::EvaluatedModel&, std::vector<float>, Done done) override {
    queue_.push_back(std::move(done));
  }
  void run() {
    while (!queue_.empty()) {
      Done done = std::move(queue_.front());
      queue_.pop_front();
      done(ml::EvalResult{0.5, 1.0, 100});
    }
  }

 private:
  std::deque<Done> queue_;
};

namespace {

// The database every session starts from, made once per process.
struct Template {
  Template() {
    setenv("FEDCASE_LOG", "error", /*overwrite=*/0);
    auto coordinator = open_coordinator(database(), std::make_unique<DeferredEvaluator>(),
                                        [] { return kStartTime; });
    json job = {{"name", "fuzz"},
                {"model", "mlp"},
                {"rounds", 3},
                {"clients_per_round", 1},
                {"selection", {{"policy", "random"}, {"overcommit", 1.0}}},
                {"training", {{"deadline", {{"mode", "fixed"}, {"seconds", 5}}}}}};
    if (must(coordinator->create_job(job)).id != kJob) setup_failed(internal_error("job id"));
    client_token = must(coordinator->register_client({{"dataset_size", 600}})).token;
  }
  std::string database() const { return dir.file("template.db"); }
  std::string session_database() const { return dir.file("session.db"); }

  testing::TempDir dir;
  std::string client_token;
};

const Template& the_template() {
  static const Template t;
  return t;
}

}  // namespace

const std::string& ApiSession::token(Token who) {
  static const std::string admin = "fuzz-admin-token-0123456789";
  static const std::string enrollment = "fuzz-enrollment-token-0123456789";
  if (who == Token::kAdmin) return admin;
  if (who == Token::kEnrollment) return enrollment;
  return the_template().client_token;
}

ApiSession::ApiSession() : now_(kStartTime) {
  const Template& t = the_template();
  const std::string database = t.session_database();
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(database + suffix);
  std::filesystem::copy_file(t.database(), database);
  auto evaluator = std::make_unique<DeferredEvaluator>();
  evaluator_ = evaluator.get();
  coordinator_ = open_coordinator(database, std::move(evaluator), [this] { return now_; });
  api_ = std::make_unique<server::Api>(*coordinator_);
  coordinator_->tick();
}

ApiSession::~ApiSession() = default;

std::optional<server::Request> ApiSession::parse(std::string_view& bytes) const {
  http::request_parser<http::string_body> parser;
  parser.header_limit(kHeaderLimit);
  parser.eager(false);
  boost::beast::error_code ec;
  // Feeds the parser until `done` holds; false on an error or when the bytes run out.
  auto feed = [&](auto done) {
    while (!done()) {
      const size_t used = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
      bytes.remove_prefix(used);
      if (ec || used == 0) return false;
    }
    return true;
  };
  if (!feed([&] { return parser.is_header_done(); })) return std::nullopt;
  const auto& header = parser.get();
  const auto codings = header.equal_range(http::field::transfer_encoding);
  for (auto it = codings.first; it != codings.second; ++it) {
    if (!boost::beast::iequals(it->value(), "chunked") ||
        header.count(http::field::transfer_encoding) > 1) {
      return std::nullopt;
    }
  }
  const uint64_t limit = api_->body_limit(header);
  if (parser.content_length() && *parser.content_length() > limit) return std::nullopt;
  parser.body_limit(limit);
  parser.eager(true);
  if (!feed([&] { return parser.is_done(); })) return std::nullopt;
  return parser.release();
}

server::Response ApiSession::handle(const server::Request& request) {
  auto check = [](const server::Response& response) {
    if (response.result() == http::status::internal_server_error) {
      fuzz_fail("500 Internal Server Error: " + response.body());
    }
    auto type = response.find(http::field::content_type);
    if (type != response.end() && type->value() == "application/json" &&
        !json::accept(response.body())) {
      fuzz_fail("a JSON answer is not valid JSON: " + response.body());
    }
  };
  server::Reply reply = api_->handle(request, {});
  static const bool trace = std::getenv("FEDCASE_FUZZ_TRACE") != nullptr;
  if (trace) {
    std::fprintf(stderr, "%s %s -> %u %.300s\n", std::string(request.method_string()).c_str(),
                 std::string(request.target()).c_str(), reply.response.result_int(),
                 reply.response.body().c_str());
  }
  check(reply.response);
  if (reply.poll) {
    if (auto again = reply.poll()) check(*again);
  }
  if (reply.watch) reply.unwatch(reply.watch([] {}));
  coordinator_->tick();
  evaluator_->run();
  now_ += 1;
  return std::move(reply.response);
}

std::string ApiSession::valid_update() {
  std::optional<uint64_t> version;
  for (const auto& job : coordinator_->list_jobs()) {
    if (job.id == kJob) version = job.model_version;
  }
  if (!version) return {};
  auto model = coordinator_->model(kJob, *version);
  if (!model.ok()) return {};
  auto base = must(decode_blob(*model->blob, model->blob->size()));
  std::fill(base.data.begin(), base.data.end(), 0.01f);
  return encode_blob(base);
}

}  // namespace fedcase::fuzz
