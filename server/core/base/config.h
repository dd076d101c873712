#pragma once
// The coordinator's service config (configs/coordinator.json). Parsing validates every field
// and fills documented defaults. A job's config is rounds/job_config.h.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "scheduling/pace.h"

namespace fedcase::server {

// TLS for the client and admin APIs (docs/deployment.md). Off when cert_file is empty.
struct TlsConfig {
  std::string cert_file;       // PEM certificate chain of the coordinator
  std::string key_file;        // PEM private key of cert_file
  std::string client_ca_file;  // set: mutual TLS, clients must present a certificate it signed
  bool enabled() const { return !cert_file.empty(); }
};

struct CoordinatorConfig {
  std::string listen_address = "127.0.0.1";
  uint16_t port = 8080;   // 0 picks a free port
  std::string port_file;  // when set, the bound port is written here at start
  // The store's URL (storage::parse_store_url): "sqlite:PATH"; a plain PATH is SQLite's too.
  std::string database = "sqlite:var/fedcase.db";
  // This process's name among coordinator replicas sharing one database (docs/scaling.md):
  // 1-64 letters, digits, '.', '_' or '-'; empty: "<hostname>-<pid>", chosen at start.
  std::string replica_id;
  // Replicas on one database (docs/scaling.md): > 0, each job's rounds are driven by the
  // replica holding the job's lease, taken for this many seconds of the database's clock and
  // renewed every lease_s / 4; a replica that stops renewing loses its jobs to the others
  // within about lease_s. 0 (the default): a single coordinator, which drives every job.
  double lease_s = 0;
  std::string admin_token;       // env FEDCASE_ADMIN_TOKEN overrides
  std::string enrollment_token;  // clients register with it; env FEDCASE_ENROLLMENT_TOKEN
  // Optional: a token that may read GET /metrics and nothing else (for a Prometheus scraper);
  // the admin token may read it too. env FEDCASE_METRICS_TOKEN.
  std::string metrics_token;
  TlsConfig tls;
  int io_threads = 2;              // read and write connections; never run a request's handler
  int handler_threads = 2;         // run requests other than uploads (auth, JSON, store writes)
  int upload_threads = 2;          // decode, validate and fold uploads, apart from other requests
  size_t max_connections = 10000;  // open connections; more are answered 503
  size_t max_connections_per_ip = 1000;  // open connections from one address; more get 503
  // Update bodies held in memory at once; further uploads wait (up to read_timeout_s) before
  // their body is read, so peak memory is about this times max_upload_bytes.
  size_t max_upload_bodies = 8;
  size_t max_json_bytes = 1 << 20;      // body limit of every JSON request
  size_t max_upload_bytes = 64u << 20;  // body limit of an update upload
  // Uploads in chunks (docs/protocol.md): the size of a chunk (the body limit of a chunk
  // request), the pieces a session's bytes are kept in (a chunk is whole pieces; one cut off
  // mid-body keeps the pieces that arrived whole; at most the chunk size), and the largest
  // update an upload session takes. A session's pieces are kept in the database until its
  // last one arrives; the update is then assembled, for its checks and its fold, in a file in
  // spool_dir (empty: the system's temporary directory), which is unlinked at once.
  size_t upload_chunk_bytes = 8u << 20;
  size_t upload_piece_bytes = 1u << 20;
  uint64_t max_chunked_upload_bytes = 4ull << 30;
  std::string spool_dir;
  // Largest model file a job may be created with (a multipart job creation's body may hold
  // this plus max_json_bytes).
  size_t max_model_bytes = 64u << 20;
  // Model exports (GET .../models/{version}/export) kept for later downloads, in bytes; one
  // larger than this is built for each request.
  size_t export_cache_bytes = 256u << 20;
  double read_timeout_s = 30;       // to receive one whole request once it has begun
  double idle_timeout_s = 60;       // a keep-alive connection without a request is closed
  double drain_timeout_s = 30;      // on stop: longest wait for requests in flight
  double long_poll_max_s = 30;      // longest wait a task poll may ask for
  double client_timeout_s = 30;     // a client silent this long is offline (unavailable)
  // When devices that get no task check in again (docs/scaling.md, "Pace steering").
  scheduling::PaceConfig pace;
  double requests_per_second = 50;  // per caller; beyond it 429 with Retry-After
  // Requests without a known token, per address; beyond it 429 (guesses at tokens).
  double unauthenticated_per_second = 10;
  std::string eval_data_dir = "/usr/share/datasets/fashion-mnist";
  size_t eval_samples = 10000;  // test-set samples (or server dataset records) per evaluation
  // Where the server datasets of TorchScript jobs live: evaluation.server_dataset names a
  // folder here (docs/protocol.md, "Server evaluation").
  std::string datasets_dir = "var/datasets";
  int torch_threads = 1;
};

// Reads `json` (values override the defaults above). Env overrides apply after. Throws
// std::runtime_error naming the offending key: config errors stop the coordinator at start-up.
CoordinatorConfig parse_coordinator_config(const nlohmann::json& json);
CoordinatorConfig load_coordinator_config(const std::string& path);

}  // namespace fedcase::server
