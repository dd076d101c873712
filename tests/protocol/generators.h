#pragma once
// Seeded random values of every wire message, each one its reader accepts, for the property
// tests: a written value reads back equal, and mutations of written values never crash.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "protocol/error_reply.h"
#include "protocol/eval_report.h"
#include "protocol/registration.h"
#include "protocol/secagg.h"
#include "protocol/task_offer.h"
#include "protocol/task_status.h"
#include "protocol/update_meta.h"
#include "protocol/upload_session.h"

namespace fedcase::protocol::testing {

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  std::mt19937_64& rng() { return rng_; }
  bool coin() { return rng_() % 2 == 0; }
  uint64_t below(uint64_t n) { return rng_() % n; }
  // Integers in [0, max]: small ones, the bounds and anything between, all likely.
  uint64_t count(uint64_t max = UINT64_MAX) {
    switch (below(4)) {
      case 0:
        return 0;
      case 1:
        return max;
      case 2:
        return below(std::min<uint64_t>(max, 1000) + 1);
      default:
        return max == UINT64_MAX ? rng_() : below(max + 1);
    }
  }
  // Finite numbers in [min, max] (0 and the bounds likely), with full 53-bit mantissas.
  double number(double min, double max) {
    switch (below(5)) {
      case 0:
        return min;
      case 1:
        return max;
      case 2:
        return min <= 0 && 0 <= max ? 0.0 : min;
      default: {
        std::uniform_real_distribution<double> u(min, max);
        return u(rng_);
      }
    }
  }
  // A number >= min without an upper bound: spread over many magnitudes.
  double unbounded(double min) {
    const double x = min + std::ldexp(std::uniform_real_distribution<double>(0, 1)(rng_),
                                      int(below(2000)) - 1000);
    return below(4) == 0 ? min : x;
  }
  // Any text up to `max` bytes, UTF-8 (ASCII and a few multi-byte characters).
  std::string text(size_t max, size_t min = 0) {
    static const char* kPieces[] = {"a", "Z", "0", "_", "-", " ", "\"", "\\", "/", "é", "€", "\n"};
    std::string s;
    const size_t n = min + below(std::min<size_t>(max, 40) - min + 1);
    while (s.size() < n) {
      std::string piece = kPieces[below(std::size(kPieces))];
      if (s.size() + piece.size() > max) piece = "a";
      s += piece;
    }
    return s;
  }
  std::string word(size_t min, size_t max) {
    static const char kWord[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_";
    const size_t n = min + below(max - min + 1);
    std::string s;
    for (size_t i = 0; i < n; ++i) s += kWord[below(sizeof(kWord) - 1)];
    return s;
  }
  std::string checksum() {
    static const char kHex[] = "0123456789abcdef";
    std::string s;
    for (int i = 0; i < 64; ++i) s += kHex[below(16)];
    return s;
  }
  std::string path() {
    std::string s = "/v1";
    const size_t n = below(6);
    for (size_t i = 0; i < n; ++i) s += "/" + word(1, 12);
    if (coin()) s += "?wait=" + std::to_string(below(100));
    return s;
  }

  EvalReport eval_report() {
    EvalReport r;
    r.model_version = count(uint64_t(INT64_MAX));
    r.samples = 1 + count(kMaxEvalSamples - 1);
    r.loss = number(0, kMaxEvalScore);
    const size_t metrics = below(kMaxEvalMetrics + 1);
    for (size_t i = 0; i < metrics; ++i) {
      const std::string name = below(4) == 0 ? "accuracy" : word(1, kMaxEvalMetricName);
      r.metrics[name] = number(0, name == "accuracy" ? 1.0 : kMaxEvalScore);
    }
    return r;
  }

  UpdateMeta update_meta() {
    UpdateMeta m;
    m.samples = 1 + count(UINT64_MAX - 1);
    m.loss_sum = unbounded(0);
    m.loss_sq_sum = unbounded(0);
    m.compute_s = unbounded(0);
    m.io_s = unbounded(0);
    m.download_s = unbounded(0);
    m.cache_hits = count();
    m.cache_misses = count();
    m.bytes_read = count();
    if (coin()) m.evaluation = eval_report();
    return m;
  }

  TrainingSettings training_settings() {
    TrainingSettings t;
    t.epochs = uint32_t(count(UINT32_MAX));
    t.batch_size = uint32_t(1 + count(kMaxBatchSize - 1));
    t.lr = number(0, kMaxLearningRate);
    t.momentum = number(0, std::nextafter(1.0, 0.0));
    t.weight_decay = number(0, kMaxWeightDecay);
    t.prox_mu = number(0, kMaxProxMu);
    return t;
  }

  CacheDirectives cache_directives() {
    const CachePolicy policies[] = {CachePolicy::kNone, CachePolicy::kLru,
                                    CachePolicy::kImportance};
    const CachePolicy policy = policies[below(3)];
    const uint64_t budget = count();
    const double factor = unbounded(1);
    return {policy, budget, factor, below(2) ? Repetition::kAdaptive : Repetition::kFixed};
  }

  TaskOffer task_offer() {
    TaskOffer t;
    t.job = count();
    t.round = 1 + count(UINT64_MAX - 1);
    t.model = word(1, 64);
    t.loss = word(1, 64);
    t.model_version = count();
    t.model_checksum = checksum();
    if (coin()) {
      t.module_checksum = checksum();
      t.module_url = path();
    }
    t.model_url = path();
    t.upload_url = path();
    t.status_url = path();
    t.deadline = unbounded(0);
    t.train = training_settings();
    if (coin()) t.evaluate = EvaluationSettings{count()};
    t.sample_budget = count();
    t.sampling = coin() ? Sampling::kUniform : Sampling::kImportance;
    t.cache = cache_directives();
    t.expected_duration_s = unbounded(0);
    if (coin()) t.secure_aggregation = secagg_task();
    if (coin()) {
      t.uploads_url = path();
      t.chunk_bytes = 1 + count(UINT64_MAX - 1);
    }
    return t;
  }

  UploadOpen upload_open() { return {1 + count(UINT64_MAX - 1), checksum()}; }
  UploadState upload_state() {
    UploadState s{path(), count(), 1 + count(UINT64_MAX - 1), 0};
    s.received = count(s.bytes);
    return s;
  }

  // A round's stages, a cohort's (with its staleness factor) or a ready task's.
  SecAggTask secagg_task() {
    SecAggTask t;
    t.stage_seconds = 0.001 + unbounded(0);
    if (coin()) {
      t.ready_url = path();
      return t;
    }
    t.keys_url = path();
    t.shares_url = path();
    t.masked_input_url = path();
    t.unmask_url = path();
    if (coin()) t.staleness_factor = 1 / (1 + unbounded(0));
    return t;
  }

  DeviceInfo device_info() {
    DeviceInfo d;
    if (coin()) d.compute_ms_per_sample = unbounded(0);
    if (coin()) d.storage_read_bytes_per_s = unbounded(0);
    if (coin()) d.sample_bytes = unbounded(0);
    const size_t facts = below(4);
    for (size_t i = 0; i < facts; ++i) {
      const std::string key = "fact_" + word(1, 8);
      switch (below(4)) {
        case 0:
          d.facts[key] = text(30);
          break;
        case 1:
          d.facts[key] = count();
          break;
        case 2:
          d.facts[key] = {{"nested", coin()}, {"list", {1, 2.5, "x"}}};
          break;
        default:
          d.facts[key] = nullptr;
      }
    }
    return d;
  }

  Registration registration() {
    Registration r;
    r.protocol_version = uint32_t(count(UINT32_MAX));
    r.sdk_version = text(kMaxSdkVersionBytes);
    r.dataset_size = count();
    r.cache_capacity_bytes = count();
    r.device = device_info();
    const size_t labels = below(kMaxLabels + 1);
    for (size_t i = 0; i < labels; ++i) {
      r.labels[text(kMaxLabelBytes, 1)] = text(kMaxLabelBytes, 1);
    }
    if (coin()) r.signing_public_key = key();
    return r;
  }

  RegistrationReply registration_reply() { return {count(), text(64, 1)}; }

  // Any bytes, `min` to `max` of them.
  std::string bytes(size_t min, size_t max) {
    std::string s(min + below(max - min + 1), '\0');
    for (char& c : s) c = static_cast<char>(below(256));
    return s;
  }
  std::string key() { return bytes(kSecAggKeyBytes, kSecAggKeyBytes); }
  // Up to `max` distinct client ids, increasing when `increasing`, else in any order.
  std::vector<ClientId> ids(size_t max, bool increasing) {
    std::set<ClientId> set;
    const size_t n = below(max + 1);
    while (set.size() < n) set.insert(count());
    std::vector<ClientId> out(set.begin(), set.end());
    if (!increasing) std::shuffle(out.begin(), out.end(), rng_);
    return out;
  }
  template <class T, class Make>
  std::vector<T> per_client(size_t max, Make make) {
    std::vector<T> out;
    for (ClientId c : ids(max, false)) out.push_back(make(c));
    return out;
  }

  SecAggParams secagg_params() {
    SecAggParams p;
    p.degree = uint32_t(1 + count(kMaxSecAggClients - 2));
    p.threshold = uint32_t(1 + below(p.degree));
    p.bits = uint32_t(1 + below(64));
    p.clip = number(1e-300, 1e300);
    p.scale = number(1e-300, 1e300);
    p.max_weight = 1 + count(UINT64_MAX - 1);
    p.vector_length = 1 + count(kMaxSecAggVectorLength - 1);
    return p;
  }
  std::string signature() { return bytes(kSecAggSignatureBytes, kSecAggSignatureBytes); }
  SecAggAdvertiseKeys secagg_advertise_keys() {
    return {count(), 1 + count(UINT64_MAX - 1), count(), key(), key(), signature()};
  }
  SecAggPeerKeys secagg_peer_keys(ClientId c) { return {c, key(), key(), key(), signature()}; }
  SecAggGraph secagg_graph() {
    return {count(), 1 + count(UINT64_MAX - 1), secagg_params(), key(), ids(30, true)};
  }
  SecAggKeyList secagg_key_list() {
    return {count(), 1 + count(UINT64_MAX - 1),
            per_client<SecAggPeerKeys>(8, [&](ClientId c) { return secagg_peer_keys(c); })};
  }
  SecAggKeys secagg_keys() {
    SecAggKeys k{secagg_graph(), secagg_key_list()};
    k.key_list.job = k.graph.job;
    k.key_list.round = k.graph.round;
    return k;
  }
  SecAggCiphertext secagg_ciphertext(ClientId c) {
    return {c, bytes(1, coin() ? 200 : kMaxSecAggBlobBytes)};
  }
  std::vector<SecAggCiphertext> ciphertexts() {
    return per_client<SecAggCiphertext>(8, [&](ClientId c) { return secagg_ciphertext(c); });
  }
  SecAggShares secagg_shares() {
    return {count(), 1 + count(UINT64_MAX - 1), count(), key(), ciphertexts()};
  }
  SecAggForwardedShares secagg_forwarded_shares() {
    return {count(), 1 + count(UINT64_MAX - 1), ciphertexts()};
  }
  SecAggMaskedInput secagg_masked_input() {
    return {count(),          1 + count(UINT64_MAX - 1),
            count(),          2 + count(kMaxSecAggVectorLength - 1),
            coin() ? 4u : 8u, ids(10, false)};
  }
  SecAggUnmaskRequest secagg_unmask_request() {
    return {count(), 1 + count(UINT64_MAX - 1), ids(10, false), ids(10, false)};
  }
  SecAggShare secagg_share(ClientId c) { return {c, bytes(1, coin() ? 44 : kMaxSecAggBlobBytes)}; }
  SecAggUnmaskResponse secagg_unmask_response() {
    const auto share = [&](ClientId c) { return secagg_share(c); };
    return {count(), 1 + count(UINT64_MAX - 1), count(), per_client<SecAggShare>(8, share),
            per_client<SecAggShare>(8, share)};
  }
  TaskStatus task_status() { return {coin(), text(40)}; }
  ErrorReply error_reply() { return {word(1, 20), text(200)}; }

 private:
  std::mt19937_64 rng_;
};

}  // namespace fedcase::protocol::testing
