// The Store's operations side by side on SQLite and PostgreSQL, in one run on one machine:
// client registration, a batch of every client's profile, update ingest (admission and
// metadata), a round's commit with a million-float model, and lease renewal; per operation the
// latency (p50, p99) and throughput, and PostgreSQL's figures over SQLite's for the ingest of
// update metadata.
//
//   store_bench [--clients N] [--updates N] [--threads T] [--rounds N] [--floats N]
//               [--renewals N]
//
// Defaults: 500 registrations (and 5 batches of their 500 profiles), 1,000 updates (one at a time,
// then over T = 4 threads), 10 commits of 1,000,000 floats, 500 renewals. SQLite is a file in a
// temp dir (WAL, synced commits); PostgreSQL a private PostgreSQL 15 server started by the
// benchmark (tests/support/postgres_server.h), reached over its Unix socket, fsync on. Both are on
// the same disk, whose fdatasync latency the run measures first (the floor of a synced commit).
//
// Ingest is admit_update, measured two ways: "ingest" in a round of target K, the replicas'
// path (on PostgreSQL one statement outside a transaction: one round trip), "ingest_direct" in
// a round of target 0, a single coordinator's. Both commit without waiting for a flush
// (Store::admit_update). The last line of output is one JSON object.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "storage/store.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace {

using namespace fedcase;
using namespace fedcase::storage;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

struct Options {
  size_t clients = 500;
  size_t updates = 1000;
  size_t threads = 4;
  size_t rounds = 10;
  size_t floats = 1'000'000;
  size_t renewals = 500;
};

constexpr size_t kProfileBatches = 5;

double seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Latencies of one operation, in seconds, and the wall time they took together.
struct Timing {
  std::vector<double> latencies;
  double wall_s = 0;

  double percentile(double p) const {
    if (latencies.empty()) return 0;
    std::vector<double> sorted = latencies;
    std::sort(sorted.begin(), sorted.end());
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()))];
  }
  double per_s() const { return wall_s > 0 ? latencies.size() / wall_s : 0; }
  Json json() const {
    return {{"count", latencies.size()},
            {"p50_ms", percentile(0.5) * 1e3},
            {"p99_ms", percentile(0.99) * 1e3},
            {"per_s", per_s()}};
  }
};

// Runs `op(i)` for i in [0, n), one at a time; stops the benchmark if one fails.
Timing measure(size_t n, const std::function<Status(size_t)>& op) {
  Timing t;
  const auto start = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    const auto op_start = Clock::now();
    Status s = op(i);
    t.latencies.push_back(seconds(op_start));
    if (!s.ok()) {
      std::cerr << "store_bench: " << s.to_string() << "\n";
      std::exit(1);
    }
  }
  t.wall_s = seconds(start);
  return t;
}

// The same over `threads` threads, op(i) for i in [0, n) split between them.
Timing measure_threads(size_t n, size_t threads, const std::function<Status(size_t)>& op) {
  std::vector<Timing> parts(threads);
  std::atomic<bool> failed{false};
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (size_t i = t; i < n; i += threads) {
        const auto op_start = Clock::now();
        Status s = op(i);
        parts[t].latencies.push_back(seconds(op_start));
        if (!s.ok()) {
          std::cerr << "store_bench: " << s.to_string() << "\n";
          failed = true;
          return;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  if (failed) std::exit(1);
  Timing all;
  for (const Timing& p : parts) {
    all.latencies.insert(all.latencies.end(), p.latencies.begin(), p.latencies.end());
  }
  all.wall_s = seconds(start);
  return all;
}

// The median latency of writing 4 KB and fdatasync-ing it, in the directory given.
double fdatasync_p50_ms(const std::string& dir) {
  const std::string path = dir + "/fsync-probe";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return 0;
  const std::string page(4096, 'x');
  Timing t = measure(50, [&](size_t) {
    if (write(fd, page.data(), page.size()) != static_cast<ssize_t>(page.size()) ||
        fdatasync(fd) != 0) {
      return internal_error("fdatasync probe failed");
    }
    return ok_status();
  });
  close(fd);
  unlink(path.c_str());
  return t.percentile(0.5) * 1e3;
}

template <class T>
T must(Result<T> r) {
  if (!r.ok()) {
    std::cerr << "store_bench: " << r.status().to_string() << "\n";
    std::exit(1);
  }
  return std::move(r).value();
}

void must(const Status& s) {
  if (s.ok()) return;
  std::cerr << "store_bench: " << s.to_string() << "\n";
  std::exit(1);
}

RoundRecord round(JobId job, RoundIndex index, uint64_t target) {
  return {job, index, RoundState::kOpen,        index - 1, {}, 1,
          1e9, 0,     nlohmann::json::object(), target,    0};
}

// Every measured operation on `store`, as JSON.
Json run(Store& store, const Options& o, const std::string& model_blob) {
  Json out;
  std::vector<ClientId> clients;
  Timing registering = measure(o.clients, [&](size_t i) {
    auto id = store.add_client({0,
                                "token-hash-" + std::to_string(i),
                                {{"dataset_size", 600}, {"device", "bench"}},
                                {{"speed", 1.0}},
                                1,
                                1});
    if (id.ok()) clients.push_back(*id);
    return id.ok() ? ok_status() : id.status();
  });
  out["register"] = registering.json();
  // Saving every registered client's profile in one batch, as the driver does with contacts.
  std::vector<ClientRecord> profiles;
  for (ClientId id : clients)
    profiles.push_back({id, "", {}, {{"speed", 2.0}, {"utility", 0.5}}, 0, 2});
  out["save_profiles"] =
      measure(kProfileBatches, [&](size_t) { return store.update_clients(profiles); }).json();
  // Clients beyond the registered ones are added unmeasured.
  while (clients.size() < o.updates) {
    clients.push_back(
        must(store.add_client({0, "token-hash-" + std::to_string(clients.size()), {}, {}, 1, 1})));
  }

  const JobId job = must(store.create_job({0, "bench", {}, JobState::kRunning, {}, 1, 0},
                                          {0, 0, model_blob, "sum", "", 1}, ""));
  const nlohmann::json meta = {{"samples", 600},     {"loss_sum", 312.5}, {"loss_sq_sum", 190.25},
                               {"compute_s", 4.5},   {"io_s", 0.8},       {"cache_hits", 420},
                               {"cache_misses", 180}};
  auto ingest = [&](RoundIndex r, size_t i, const std::string& replica) {
    return store.admit_update({job, r, clients[i], meta, 2.0 + i, replica}).status();
  };
  must(store.open_round(round(job, 1, o.updates)));
  out["ingest"] = measure(o.updates, [&](size_t i) { return ingest(1, i, "r1"); }).json();
  must(store.fail_round({job, 1, RoundState::kFailed, 0, {}, 1, 1e9, 3, {}}));
  must(store.open_round(round(job, 2, o.updates)));
  out["ingest_threads"] =
      measure_threads(o.updates, o.threads, [&](size_t i) { return ingest(2, i, "r1"); }).json();
  must(store.fail_round({job, 2, RoundState::kFailed, 1, {}, 1, 1e9, 3, {}}));
  must(store.open_round(round(job, 3, 0)));
  out["ingest_direct"] = measure(o.updates, [&](size_t i) { return ingest(3, i, ""); }).json();
  must(store.fail_round({job, 3, RoundState::kFailed, 2, {}, 1, 1e9, 3, {}}));

  Timing committing;
  for (size_t r = 0; r < o.rounds; ++r) {
    const RoundIndex index = 4 + r;
    must(store.open_round(round(job, index, 0)));
    RoundRecord done = round(job, index, 0);
    done.closed_at = 5;
    done.metrics = {{"updates", 10}};
    const auto start = Clock::now();
    must(store.commit_round(done, {job, index, model_blob, "sum", "opt", 5}, {{"round", r}}));
    committing.latencies.push_back(seconds(start));
    committing.wall_s += seconds(start);
  }
  out["commit_round"] = committing.json();

  const LeaseRecord lease = must(store.acquire_lease(job, "bench-replica", 30));
  out["renew_lease"] = measure(o.renewals, [&](size_t) {
                         auto renewed = store.renew_lease(job, "bench-replica", lease.epoch, 30);
                         return renewed.ok() ? ok_status() : renewed.status();
                       }).json();
  return out;
}

bool parse_args(int argc, char** argv, Options& o) {
  const std::map<std::string, size_t*> counts = {
      {"--clients", &o.clients}, {"--updates", &o.updates}, {"--threads", &o.threads},
      {"--rounds", &o.rounds},   {"--floats", &o.floats},   {"--renewals", &o.renewals}};
  for (int i = 1; i < argc; i += 2) {
    if (!counts.count(argv[i]) || i + 1 >= argc) return false;
    char* end = nullptr;
    *counts.at(argv[i]) = std::strtoull(argv[i + 1], &end, 10);
    if (*end != '\0') return false;
  }
  return o.threads > 0 && o.updates > 0 && o.clients > 0;
}

double ratio(const Json& pg, const Json& sqlite, const char* op, const char* figure) {
  const double base = sqlite[op][figure].get<double>();
  return base > 0 ? pg[op][figure].get<double>() / base : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_args(argc, argv, o)) {
    std::cerr << "usage: store_bench [--clients N] [--updates N] [--threads T] [--rounds N] "
                 "[--floats N] [--renewals N]\n";
    return 2;
  }
  // A model blob's size: a million float32 and a small header's worth.
  std::string model_blob(o.floats * 4 + 256, '\0');
  for (size_t i = 0; i < model_blob.size(); ++i)
    model_blob[i] = static_cast<char>(i * 2654435761u >> 24);

  testing::TempDir dir;
  const double fsync_ms = fdatasync_p50_ms(dir.path().string());
  std::cout << "fdatasync of 4 KB: p50 " << fsync_ms << " ms\n";

  Json results;
  {
    auto store = must(open_sqlite_store(dir.file("bench.db")));
    results["sqlite"] = run(*store, o, model_blob);
  }
  {
    testing::PostgresServer server;
    const std::string database = server.create_database();
    auto store = must(open_store(server.url(database)));
    results["postgresql"] = run(*store, o, model_blob);
  }

  std::printf("%-15s %-11s %10s %10s %10s\n", "operation", "backend", "p50 ms", "p99 ms", "per s");
  for (const char* op : {"register", "save_profiles", "ingest", "ingest_threads", "ingest_direct",
                         "commit_round", "renew_lease"}) {
    for (const char* backend : {"sqlite", "postgresql"}) {
      const Json& f = results[backend][op];
      std::printf("%-15s %-11s %10.3f %10.3f %10.1f\n", op, backend, f["p50_ms"].get<double>(),
                  f["p99_ms"].get<double>(), f["per_s"].get<double>());
    }
  }
  const Json& pg = results["postgresql"];
  const Json& lite = results["sqlite"];
  Json ratios = {
      {"ingest_p50", ratio(pg, lite, "ingest", "p50_ms")},
      {"ingest_per_s", ratio(pg, lite, "ingest", "per_s")},
      {"ingest_threads_per_s", ratio(pg, lite, "ingest_threads", "per_s")},
      {"ingest_direct_p50", ratio(pg, lite, "ingest_direct", "p50_ms")},
      {"ingest_direct_per_s", ratio(pg, lite, "ingest_direct", "per_s")},
      {"commit_round_p50", ratio(pg, lite, "commit_round", "p50_ms")},
  };
  std::cout << "PostgreSQL over SQLite, update ingest: p50 latency x" << ratios["ingest_p50"]
            << ", throughput x" << ratios["ingest_per_s"] << " (one at a time), x"
            << ratios["ingest_threads_per_s"] << " (" << o.threads << " threads)\n";

  Json out = {{"bench", "store_bench"},
              {"clients", o.clients},
              {"updates", o.updates},
              {"threads", o.threads},
              {"rounds", o.rounds},
              {"floats", o.floats},
              {"renewals", o.renewals},
              {"fdatasync_p50_ms", fsync_ms},
              {"sqlite", lite},
              {"postgresql", pg},
              {"postgresql_over_sqlite", ratios}};
  std::cout << out.dump() << std::endl;
  return 0;
}
