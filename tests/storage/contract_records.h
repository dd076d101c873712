#pragma once
// What the Store contract's cases share (store_contract.cpp, cluster_contract.cpp): records to
// store and helpers that REQUIRE their calls to succeed. Internal to the contract library.

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/storage/store_contract.h"

namespace fedcase::storage::contract {

inline std::unique_ptr<Store> open(Backend& backend) {
  auto store = backend.open();
  REQUIRE_MESSAGE(store.ok(), store.status().to_string());
  return std::move(store).value();
}

// Bytes no text column would keep: NULs, 0xFF, a zip signature.
inline const std::string kBinary("PK\x03\x04\0mod\xff\xfe\0ule", 14);

// A checksum is text (blob_checksum's hex), whatever bytes the blob holds.
inline std::string hex(const std::string& bytes) {
  static const char* const kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

inline ModelRecord model(JobId job, uint64_t version, const std::string& blob) {
  return {job, version, blob, "sum-" + hex(blob), "opt-" + blob + kBinary, 100.0 + version};
}

inline ClientRecord client(const std::string& token_hash) {
  return {0,
          token_hash,
          {{"dataset_size", 120}, {"device", {{"model", "phone \xc3\xa9"}, {"cores", 4}}}},
          {{"speed", 1.5}},
          10.25,
          11.5};
}

inline JobRecord job_record(const std::string& name, TenantId tenant = 0) {
  return {0,
          name,
          {{"rounds", 5}, {"selection", {{"policy", "fedcase"}}}},
          JobState::kRunning,
          {{"rho", 0.25}},
          5.5,
          tenant};
}

inline RoundRecord open_round_record(JobId job, RoundIndex index,
                                     std::vector<ClientId> selected = {}) {
  return {
      job,          index, RoundState::kOpen,       index - 1, std::move(selected), 30.0 + index,
      90.0 + index, 0,     nlohmann::json::object()};
}

// `round` as its conclusion records it: closed at `closed_at` with `metrics`.
inline RoundRecord closed(RoundRecord round, double closed_at, nlohmann::json metrics) {
  round.closed_at = closed_at;
  round.metrics = std::move(metrics);
  return round;
}

inline JobId create(Store& store, const JobRecord& job, const std::string& blob = "m0",
                    const std::string& module = "") {
  auto id = store.create_job(job, model(0, 0, blob), module);
  REQUIRE_MESSAGE(id.ok(), id.status().to_string());
  return *id;
}

inline ClientId add(Store& store, const std::string& token_hash) {
  auto id = store.add_client(client(token_hash));
  REQUIRE_MESSAGE(id.ok(), id.status().to_string());
  return *id;
}

inline void check_same_model(const ModelRecord& got, const ModelRecord& want) {
  CHECK(got.job == want.job);
  CHECK(got.version == want.version);
  CHECK(got.blob == want.blob);
  CHECK(got.checksum == want.checksum);
  CHECK(got.optimizer_state == want.optimizer_state);
  CHECK(got.created_at == want.created_at);
}

// The cases of the primitives coordinator replicas use (leases, fencing, admission, partials,
// tenants' service, wake-ups, concurrent migration); check_store_contract runs them after the
// others.
void check_cluster_contract(const BackendFactory& factory);

}  // namespace fedcase::storage::contract
