#include "protocol/registration.h"

#include <doctest/doctest.h>

#include <string>

#include "protocol/error_reply.h"
#include "protocol/task_status.h"
#include "protocol/version.h"

namespace fedcase::protocol {
namespace {

using nlohmann::json;

template <class T>
bool reads_as(const Result<T>& read, const T& expected) {
  return read.ok() && *read == expected;
}

TEST_CASE("a registration reads its facts, measurements and labels") {
  auto r = read_registration(json::parse(R"({
      "protocol_version": 1, "sdk_version": "fedcase-sdk/1", "dataset_size": 600,
      "cache_capacity_bytes": 1048576, "labels": {"region": "eu"}, "extra": true,
      "device": {"kind": "phone", "sample_bytes": 3136, "compute_ms_per_sample": 0.8}})"));
  REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  CHECK(r->protocol_version == 1);
  CHECK(r->sdk_version == "fedcase-sdk/1");
  CHECK(r->dataset_size == 600);
  CHECK(r->cache_capacity_bytes == 1048576);
  CHECK(r->labels == std::map<std::string, std::string>{{"region", "eu"}});
  CHECK(r->device.sample_bytes == 3136);
  CHECK(r->device.compute_ms_per_sample == 0.8);
  CHECK(r->device.storage_read_bytes_per_s == 0);
  CHECK(r->device.facts == json{{"kind", "phone"}});
  CHECK(write_device_info(r->device) ==
        json{{"kind", "phone"}, {"sample_bytes", 3136.0}, {"compute_ms_per_sample", 0.8}});
}

TEST_CASE("a registration without a protocol version is an SDK from before versioning") {
  auto r = read_registration(json::object());
  REQUIRE(r.ok());
  CHECK(r->protocol_version == kUnversionedProtocol);
  CHECK(check_sdk_version(r->protocol_version).ok());
}

TEST_CASE("a registration with a bad member is refused, naming it") {
  auto error = [](const json& request) {
    auto r = read_registration(request);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    return r.status().message();
  };
  CHECK(error(json::array()) == "registration must be an object");
  CHECK(error({{"dataset_size", -1}}).find("registration.dataset_size") != std::string::npos);
  CHECK(error({{"cache_capacity_bytes", 1.5}}).find("registration.cache_capacity_bytes") !=
        std::string::npos);
  CHECK(error({{"protocol_version", "1"}}).find("registration.protocol_version") !=
        std::string::npos);
  CHECK(error({{"sdk_version", 1}}).find("registration.sdk_version") != std::string::npos);
  CHECK(error({{"sdk_version", std::string(257, 'v')}}).find("registration.sdk_version") !=
        std::string::npos);
  CHECK(error({{"device", "phone"}}) == "registration.device must be an object");
  CHECK(error({{"device", {{"sample_bytes", -1}}}}) ==
        "registration.device.sample_bytes must be a finite number >= 0");
  CHECK(error({{"device", {{"compute_ms_per_sample", "fast"}}}})
            .find("registration.device.compute_ms_per_sample") != std::string::npos);
  CHECK(error({{"labels", {{"region", 3}}}}).find("registration.labels") != std::string::npos);
  json seventeen = json::object();
  for (int i = 0; i < 17; ++i) seventeen["k" + std::to_string(i)] = "v";
  CHECK(error({{"labels", seventeen}}).find("at most 16") != std::string::npos);
  CHECK(error({{"labels", {{std::string(65, 'k'), "v"}}}}).find("1 to 64") != std::string::npos);
  CHECK(error({{"labels", {{"k", ""}}}}).find("1 to 64") != std::string::npos);
}

TEST_CASE("the coordinator's answers read what it writes, and refuse what it never writes") {
  CHECK(reads_as(read_registration_reply({{"client_id", 7}, {"token", "t"}}),
                 RegistrationReply{7, "t"}));
  CHECK_FALSE(read_registration_reply({{"client_id", 7}}).ok());
  CHECK_FALSE(read_registration_reply({{"client_id", -7}, {"token", "t"}}).ok());
  CHECK_FALSE(read_registration_reply({{"client_id", 7}, {"token", ""}}).ok());
  CHECK(reads_as(read_task_status({{"needed", false}, {"reason", "round filled"}}),
                 TaskStatus{false, "round filled"}));
  CHECK(read_task_status({{"needed", "no"}, {"reason", ""}}).status().message() ==
        "task_status.needed must be true or false");
  CHECK(reads_as(read_error_reply(write_error_reply({"conflict", "late"})),
                 ErrorReply{"conflict", "late"}));
  CHECK(read_error_reply({{"error", "late"}}).status().message() ==
        "answer.error must be an object");
  CHECK_FALSE(read_error_reply({{"message", "late"}}).ok());
}

}  // namespace
}  // namespace fedcase::protocol
