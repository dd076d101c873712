#include "protocol/registration.h"

#include <optional>

#include "protocol/base64.h"

#include "protocol/internal.h"

namespace fedcase::protocol {
namespace {

// The measurements of DeviceInfo, by member name.
struct Measurement {
  const char* key;
  double DeviceInfo::*field;
};
constexpr Measurement kMeasurements[] = {
    {"compute_ms_per_sample", &DeviceInfo::compute_ms_per_sample},
    {"storage_read_bytes_per_s", &DeviceInfo::storage_read_bytes_per_s},
    {"sample_bytes", &DeviceInfo::sample_bytes},
};

bool is_measurement(const std::string& key) {
  for (const Measurement& m : kMeasurements) {
    if (key == m.key) return true;
  }
  return false;
}

}  // namespace

Result<std::map<std::string, std::string>> read_labels(const nlohmann::json& labels,
                                                       const std::string& where) {
  if (!labels.is_object()) return invalid_argument(where + " must be a JSON object");
  if (labels.size() > kMaxLabels) {
    return invalid_argument(where + " may hold at most " + std::to_string(kMaxLabels) + " labels");
  }
  std::map<std::string, std::string> out;
  for (const auto& item : labels.items()) {
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
    const auto fits = [](size_t n) { return n >= 1 && n <= kMaxLabelBytes; };
    if (!fits(key.size()) || !value.is_string() ||
        !fits(value.get_ref<const std::string&>().size())) {
      return invalid_argument(where + ": keys and values must be strings of 1 to 64 bytes");
    }
    out[key] = value.get<std::string>();
  }
  return out;
}

nlohmann::json write_labels(const std::map<std::string, std::string>& labels) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : labels) out[key] = value;
  return out;
}

namespace internal {

Status read(const nlohmann::json& value, const std::string& where, DeviceInfo& out, Keys* keys) {
  ObjectReader r(value, where);
  for (const Measurement& m : kMeasurements) r.finite(m.key, out.*m.field, 0);
  if (value.is_object()) {
    out.facts = nlohmann::json::object();
    for (const auto& item : value.items()) {
      if (!is_measurement(item.key())) out.facts[item.key()] = item.value();
    }
  }
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, Registration& out, Keys* keys) {
  ObjectReader r(value, where);
  out.protocol_version = kUnversionedProtocol;
  r.integer("protocol_version", out.protocol_version)
      .text("sdk_version", out.sdk_version)
      .integer("dataset_size", out.dataset_size)
      .integer("cache_capacity_bytes", out.cache_capacity_bytes);
  check(r, out.sdk_version.size() <= kMaxSdkVersionBytes, "sdk_version",
        "may hold at most 256 bytes");
  read_nested(r, "device", out.device);
  if (const nlohmann::json* labels = r.member("labels")) {
    auto read = read_labels(*labels, r.path("labels"));
    r.merge(read.status());
    if (read.ok()) out.labels = std::move(read).value();
  }
  std::string signing_key;
  r.text("signing_public_key", signing_key);
  if (!signing_key.empty()) {
    std::optional<std::string> raw;
    if (signing_key.size() <= 44) raw = decode_base64(signing_key);
    check(r, raw && raw->size() == 32, "signing_public_key", "must be base64 of 32 bytes");
    if (raw && raw->size() == 32) out.signing_public_key = std::move(*raw);
  }
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, RegistrationReply& out,
            Keys* keys) {
  ObjectReader r(value, where);
  r.require("client_id")
      .integer("client_id", out.client_id)
      .require("token")
      .text("token", out.token);
  check(r, !out.token.empty(), "token", "must not be empty");
  return finish(r, keys);
}

}  // namespace internal

Result<Registration> read_registration(const nlohmann::json& request) {
  return internal::read_message<Registration>(request, "registration");
}

nlohmann::json write_registration(const Registration& r) {
  nlohmann::json out = {
      {"protocol_version", r.protocol_version}, {"sdk_version", r.sdk_version},
      {"dataset_size", r.dataset_size},         {"cache_capacity_bytes", r.cache_capacity_bytes},
      {"device", write_device_info(r.device)},  {"labels", write_labels(r.labels)}};
  if (!r.signing_public_key.empty()) {
    out["signing_public_key"] = encode_base64(r.signing_public_key);
  }
  return out;
}

Result<DeviceInfo> read_device_info(const nlohmann::json& device, const std::string& where) {
  return internal::read_message<DeviceInfo>(device, where);
}

nlohmann::json write_device_info(const DeviceInfo& d) {
  nlohmann::json out = d.facts.is_object() ? d.facts : nlohmann::json::object();
  for (const Measurement& m : kMeasurements) {
    out.erase(m.key);
    if (d.*m.field > 0) out[m.key] = d.*m.field;
  }
  return out;
}

Result<RegistrationReply> read_registration_reply(const nlohmann::json& reply) {
  return internal::read_message<RegistrationReply>(reply, "registration_reply");
}

nlohmann::json write_registration_reply(const RegistrationReply& r) {
  return {{"client_id", r.client_id}, {"token", r.token}};
}

}  // namespace fedcase::protocol
