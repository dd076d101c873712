#pragma once
// A client's registration (POST /v1/clients/register, docs/protocol.md): what it says about
// itself, the protocol version it speaks, and the coordinator's answer (its id and token).
// Also the rule for client labels, which a job's client_labels follow too.
//
// Pure functions over plain values; thread-safe. Untrusted input gives a Status, never an
// exception.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/ids.h"
#include "common/status.h"
#include "protocol/version.h"

namespace fedcase::protocol {

inline constexpr size_t kMaxLabels = 16;
inline constexpr size_t kMaxLabelBytes = 64;  // of a key or a value, at least 1
inline constexpr size_t kMaxSdkVersionBytes = 256;

// Client labels ({"region": "eu", "tier": "phone"}): at most 16, keys and values strings of 1
// to 64 bytes. kInvalidArgument naming `where` otherwise.
Result<std::map<std::string, std::string>> read_labels(const nlohmann::json& labels,
                                                       const std::string& where);
nlohmann::json write_labels(const std::map<std::string, std::string>& labels);

// The registration's `device`: free-form facts about the device, and the probe measurements
// the scheduler uses until it has measured the client itself (each finite and >= 0; 0: not
// measured, and not written).
struct DeviceInfo {
  double compute_ms_per_sample = 0;
  double storage_read_bytes_per_s = 0;
  double sample_bytes = 0;  // the mean size of a local sample record
  // Every other member of `device`, as sent ({"kind": "phone"}): shown to operators, never
  // interpreted. An object; it holds none of the measurement keys above.
  nlohmann::json facts = nlohmann::json::object();

  bool operator==(const DeviceInfo& o) const {
    return compute_ms_per_sample == o.compute_ms_per_sample &&
           storage_read_bytes_per_s == o.storage_read_bytes_per_s &&
           sample_bytes == o.sample_bytes && facts == o.facts;
  }
  bool operator!=(const DeviceInfo& o) const { return !(*this == o); }
};

// Every member is optional.
struct Registration {
  // The protocol the SDK speaks; absent: kUnversionedProtocol. The coordinator checks it with
  // check_sdk_version.
  uint32_t protocol_version = kProtocolVersion;
  std::string sdk_version;    // the SDK's own name and version, at most 256 bytes ("fedcase-sdk/1")
  uint64_t dataset_size = 0;  // local training samples
  uint64_t cache_capacity_bytes = 0;  // caps the task's cache budget; 0: no cap
  DeviceInfo device;
  std::map<std::string, std::string> labels;  // read_labels; jobs may ask for some
  // The client's long-term Ed25519 public key (32 raw bytes; base64 in JSON), with which it
  // signs the keys it advertises in secure rounds (docs/secure_aggregation.md, "Signed keys");
  // empty: none (such a client cannot take part in secure rounds).
  std::string signing_public_key;

  bool operator==(const Registration& o) const {
    return protocol_version == o.protocol_version && sdk_version == o.sdk_version &&
           dataset_size == o.dataset_size && cache_capacity_bytes == o.cache_capacity_bytes &&
           device == o.device && labels == o.labels && signing_public_key == o.signing_public_key;
  }
  bool operator!=(const Registration& o) const { return !(*this == o); }
};

// kInvalidArgument naming the field for a mistyped or out-of-range one. Unknown keys are
// ignored. The protocol version is read, not judged (check_sdk_version does that).
Result<Registration> read_registration(const nlohmann::json& request);
nlohmann::json write_registration(const Registration& registration);
Result<DeviceInfo> read_device_info(const nlohmann::json& device,
                                    const std::string& where = "device");
nlohmann::json write_device_info(const DeviceInfo& device);

// The coordinator's answer to a registration: the client's id and its bearer token (shown
// only here), both required, the token non-empty.
struct RegistrationReply {
  ClientId client_id = 0;
  std::string token;

  bool operator==(const RegistrationReply& o) const {
    return client_id == o.client_id && token == o.token;
  }
  bool operator!=(const RegistrationReply& o) const { return !(*this == o); }
};

Result<RegistrationReply> read_registration_reply(const nlohmann::json& reply);
nlohmann::json write_registration_reply(const RegistrationReply& reply);

}  // namespace fedcase::protocol
