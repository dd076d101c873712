// Property tests: for every message, over many seeded random values, what the writer writes the
// reader reads back equal, as JSON and as JSON text, and the writer writes no member the
// reader does not read.

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "tests/protocol/generators.h"

namespace fedcase::protocol {
namespace {

using nlohmann::json;

constexpr int kValues = 2000;

// The members of `written` that `message`'s reader does not read, but for `free_form` ones.
std::vector<std::string> unread(Message message, const json& written,
                                const json& free_form = json::object()) {
  const std::vector<std::string> fields = message_fields(message);
  std::vector<std::string> out;
  for (const auto& item : written.items()) {
    if (!std::binary_search(fields.begin(), fields.end(), item.key()) &&
        !free_form.contains(item.key())) {
      out.push_back(item.key());
    }
  }
  return out;
}

// A device's facts are free-form: kept, not read.
json free_form(const DeviceInfo& device) { return device.facts; }
template <class T>
json free_form(const T&) {
  return json::object();
}

// Writes `value`, reads it back from the JSON and from its text, and checks both are equal.
template <class T>
void check_round_trip(Message message, const T& value, json (*write)(const T&),
                      Result<T> (*read)(const json&)) {
  const json written = write(value);
  CAPTURE(written.dump());
  CHECK(unread(message, written, free_form(value)).empty());
  const Result<T> back = read(written);
  REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  CHECK(*back == value);
  const Result<T> from_text = read(json::parse(written.dump()));
  REQUIRE_MESSAGE(from_text.ok(), from_text.status().to_string());
  CHECK(*from_text == value);
}

// The nested readers with a default `where`, as plain function pointers.
Result<EvalReport> read_report(const json& j) { return read_eval_report(j); }
Result<TrainingSettings> read_train(const json& j) { return read_training_settings(j); }
Result<EvaluationSettings> read_evaluate(const json& j) { return read_evaluation_settings(j); }
Result<CacheDirectives> read_cache(const json& j) { return read_cache_directives(j); }
Result<DeviceInfo> read_device(const json& j) { return read_device_info(j); }
Result<SecAggParams> read_params(const json& j) { return read_secagg_params(j); }
Result<SecAggPeerKeys> read_peer(const json& j) { return read_secagg_peer_keys(j); }
Result<SecAggCiphertext> read_ciphertext(const json& j) { return read_secagg_ciphertext(j); }
Result<SecAggShare> read_share(const json& j) { return read_secagg_share(j); }
Result<SecAggTask> read_secure(const json& j) { return read_secagg_task(j); }

TEST_CASE("every message reads back what was written, over random values") {
  for (uint64_t seed = 1; seed <= kValues; ++seed) {
    CAPTURE(seed);
    testing::Generator g(seed);
    check_round_trip(Message::kEvalReport, g.eval_report(), write_eval_report, read_report);
    check_round_trip(Message::kUpdateMeta, g.update_meta(), write_update_meta, read_update_meta);
    check_round_trip(Message::kTrainingSettings, g.training_settings(), write_training_settings,
                     read_train);
    check_round_trip(Message::kEvaluationSettings, EvaluationSettings{g.count()},
                     write_evaluation_settings, read_evaluate);
    check_round_trip(Message::kCacheDirectives, g.cache_directives(), write_cache_directives,
                     read_cache);
    check_round_trip(Message::kTaskOffer, g.task_offer(), write_task_offer, read_task_offer);
    check_round_trip(Message::kSecAggTask, g.secagg_task(), write_secagg_task, read_secure);
    check_round_trip(Message::kDeviceInfo, g.device_info(), write_device_info, read_device);
    check_round_trip(Message::kRegistration, g.registration(), write_registration,
                     read_registration);
    check_round_trip(Message::kRegistrationReply, g.registration_reply(), write_registration_reply,
                     read_registration_reply);
    check_round_trip(Message::kTaskStatus, g.task_status(), write_task_status, read_task_status);
    check_round_trip(Message::kUploadOpen, g.upload_open(), write_upload_open, read_upload_open);
    check_round_trip(Message::kUploadState, g.upload_state(), write_upload_state,
                     read_upload_state);
  }
}

TEST_CASE("a chunk's Content-Range reads back as written, and nothing else reads") {
  for (uint64_t seed = 1; seed <= kValues; ++seed) {
    testing::Generator g(seed);
    ContentRange range;
    range.total = 1 + g.count(999999999999999999ull);  // at most 19 digits
    range.last = g.count(range.total - 1);
    range.first = g.count(range.last);
    auto read = parse_content_range(write_content_range(range));
    REQUIRE(read.ok());
    CHECK(*read == range);
  }
  CHECK(parse_content_range("bytes 0-9/10").ok());
  for (const char* bad : {"", "bytes", "bytes 0-9", "bytes */10", "bytes 5-4/10", "bytes 0-10/10",
                          "bytes -1-9/10", "bytes 0-9/10 ", "bytes  0-9/10", "Bytes 0-9/10",
                          "bytes 0-9/+10", "bytes 0x0-9/10", "bytes 00000000000000000001-2/3",
                          "bytes 0-18446744073709551616/18446744073709551617", "items 0-9/10"}) {
    CAPTURE(bad);
    CHECK(parse_content_range(bad).status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("every secure-aggregation message reads back what was written, over random values") {
  for (uint64_t seed = 1; seed <= kValues; ++seed) {
    CAPTURE(seed);
    testing::Generator g(seed);
    check_round_trip(Message::kSecAggParams, g.secagg_params(), write_secagg_params, read_params);
    check_round_trip(Message::kSecAggAdvertiseKeys, g.secagg_advertise_keys(),
                     write_secagg_advertise_keys, read_secagg_advertise_keys);
    check_round_trip(Message::kSecAggPeerKeys, g.secagg_peer_keys(g.count()),
                     write_secagg_peer_keys, read_peer);
    check_round_trip(Message::kSecAggGraph, g.secagg_graph(), write_secagg_graph,
                     read_secagg_graph);
    check_round_trip(Message::kSecAggKeyList, g.secagg_key_list(), write_secagg_key_list,
                     read_secagg_key_list);
    const SecAggKeys keys = g.secagg_keys();
    check_round_trip(Message::kSecAggKeys, keys, write_secagg_keys, read_secagg_keys);
    CHECK(splice_secagg_keys(write_secagg_graph(keys.graph).dump(),
                             write_secagg_key_list(keys.key_list).dump()) ==
          write_secagg_keys(keys).dump());
    check_round_trip(Message::kSecAggCiphertext, g.secagg_ciphertext(g.count()),
                     write_secagg_ciphertext, read_ciphertext);
    check_round_trip(Message::kSecAggShares, g.secagg_shares(), write_secagg_shares,
                     read_secagg_shares);
    check_round_trip(Message::kSecAggForwardedShares, g.secagg_forwarded_shares(),
                     write_secagg_forwarded_shares, read_secagg_forwarded_shares);
    check_round_trip(Message::kSecAggMaskedInput, g.secagg_masked_input(),
                     write_secagg_masked_input, read_secagg_masked_input);
    check_round_trip(Message::kSecAggUnmaskRequest, g.secagg_unmask_request(),
                     write_secagg_unmask_request, read_secagg_unmask_request);
    check_round_trip(Message::kSecAggShare, g.secagg_share(g.count()), write_secagg_share,
                     read_share);
    check_round_trip(Message::kSecAggUnmaskResponse, g.secagg_unmask_response(),
                     write_secagg_unmask_response, read_secagg_unmask_response);
  }
}

TEST_CASE("an error answer reads back what was written, over random values") {
  for (uint64_t seed = 1; seed <= kValues; ++seed) {
    CAPTURE(seed);
    testing::Generator g(seed);
    const ErrorReply error = g.error_reply();
    const json written = write_error_reply(error);
    REQUIRE(written.size() == 1);
    CHECK(unread(Message::kErrorReply, written["error"]).empty());
    const Result<ErrorReply> back = read_error_reply(json::parse(written.dump()));
    REQUIRE_MESSAGE(back.ok(), back.status().to_string());
    CHECK(*back == error);
  }
}

TEST_CASE("every message of the catalogue has a name and fields") {
  std::vector<std::string> names;
  for (Message m : all_messages()) {
    CAPTURE(message_name(m));
    CHECK(!std::string(message_name(m)).empty());
    CHECK_FALSE(message_fields(m).empty());
    names.push_back(message_name(m));
  }
  std::sort(names.begin(), names.end());
  CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());
}

}  // namespace
}  // namespace fedcase::protocol
