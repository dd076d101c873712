#include "server/service.h"

#include <fstream>

#include "common/log.h"
#include "ml/dataset.h"
#include "server/api/api.h"
#include "server/core/base/evaluator.h"
#include "server/transport/http_server.h"

namespace fedcase::server {
namespace {

// The coordinator over the store config.database names (storage::open_store), scoring models on the
// test set at config.eval_data_dir. kNotFound / kInternal with a clear message when either is
// unusable.
Result<std::unique_ptr<Coordinator>> open_coordinator(const CoordinatorConfig& config) {
  auto store = storage::open_store(config.database);
  if (!store.ok()) return store.status();
  auto eval = ml::load_fashion_mnist(config.eval_data_dir, ml::Split::kTest);
  if (!eval.ok()) return eval.status();
  auto evaluator = std::make_unique<TestSetEvaluator>(std::move(eval).value(), config.eval_samples,
                                                      config.torch_threads);
  return Coordinator::open(config, std::move(store).value(), std::move(evaluator));
}

}  // namespace

struct CoordinatorService::Impl {
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<Api> api;
  std::unique_ptr<HttpServer> http;
  bool stopped = false;
};

CoordinatorService::CoordinatorService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CoordinatorService::~CoordinatorService() { stop(); }

Result<std::unique_ptr<CoordinatorService>> CoordinatorService::start(
    const CoordinatorConfig& config) {
  auto impl = std::make_unique<Impl>();
  auto coordinator = open_coordinator(config);
  if (!coordinator.ok()) return coordinator.status();
  impl->coordinator = std::move(coordinator).value();
  impl->api = std::make_unique<Api>(*impl->coordinator);
  impl->http = std::make_unique<HttpServer>(*impl->api, impl->coordinator->config(),
                                            impl->coordinator->metrics());
  FEDCASE_RETURN_IF_ERROR(impl->http->start());
  if (!config.port_file.empty()) {
    std::ofstream out(config.port_file + ".tmp");
    out << impl->http->port() << "\n";
    out.close();
    if (!out || std::rename((config.port_file + ".tmp").c_str(), config.port_file.c_str()) != 0) {
      return internal_error("cannot write port file " + config.port_file);
    }
  }
  impl->coordinator->start_driver();
  log_info(std::string("coordinator listening on ") + (impl->http->tls() ? "https://" : "http://") +
           config.listen_address + ":" + std::to_string(impl->http->port()));
  return std::unique_ptr<CoordinatorService>(new CoordinatorService(std::move(impl)));
}

uint16_t CoordinatorService::port() const { return impl_->http->port(); }

Coordinator& CoordinatorService::coordinator() { return *impl_->coordinator; }

void CoordinatorService::stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  const double timeout_s = impl_->coordinator->config().drain_timeout_s;
  if (!impl_->http->drain(timeout_s)) {
    log_warn("stopping with " + std::to_string(impl_->http->open_connections()) +
             " connections still busy after " + std::to_string(int(timeout_s)) + " s");
  }
  // Stopping the front end joins its handler threads, so no upload is still being folded
  // when the rounds are concluded (a drain that timed out may have left some running).
  impl_->http->stop();
  impl_->coordinator->conclude_rounds();
}

}  // namespace fedcase::server
