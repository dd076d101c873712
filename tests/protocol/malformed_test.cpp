// Every reader over a seeded fuzzed corpus: valid messages mutated member by member (dropped,
// retyped, out of range, non-finite, deeply nested, unknown members) and as text (bytes
// flipped, cut, inserted). Each document gives a value or a Status, never an exception or a
// crash; an error names what is wrong; and what a reader accepts it accepts again once
// written (what it read is valid).

#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/json_read.h"
#include "tests/protocol/generators.h"

namespace fedcase::protocol {
namespace {

using nlohmann::json;

constexpr int kDocuments = 3000;

json junk(testing::Generator& g, int depth = 0) {
  switch (g.below(14)) {
    case 0:
      return nullptr;
    case 1:
      return g.coin();
    case 2:
      return -int64_t(1 + g.below(1000));
    case 3:
      return std::numeric_limits<int64_t>::min();
    case 4:
      return std::numeric_limits<uint64_t>::max();
    case 5:
      return std::numeric_limits<double>::quiet_NaN();
    case 6:
      return g.coin() ? std::numeric_limits<double>::infinity()
                      : -std::numeric_limits<double>::infinity();
    case 7:
      return -0.5 - double(g.below(10));
    case 8:
      return 1e300 * double(1 + g.below(9));
    case 9:
      return g.text(80);
    case 10:
      return std::string(g.below(5000), 'x');
    case 11: {
      json deep = 1;
      for (int i = 0; i < 50; ++i) deep = json::array({deep});
      return deep;
    }
    case 12:
      return depth < 3 ? json::array({junk(g, depth + 1), junk(g, depth + 1)}) : json::array();
    default:
      return depth < 3 ? json{{g.word(1, 10), junk(g, depth + 1)}} : json::object();
  }
}

// One random change somewhere in `doc` (its members, nested ones included).
void mutate(testing::Generator& g, json& doc) {
  if (!doc.is_object() || doc.empty() || g.below(20) == 0) {
    doc = junk(g);
    return;
  }
  auto it = doc.begin();
  std::advance(it, g.below(doc.size()));
  if (it->is_object() && g.coin()) return mutate(g, *it);
  switch (g.below(4)) {
    case 0:
      doc.erase(it);
      break;
    case 1:
      doc[g.word(1, 12)] = junk(g);  // an unknown member
      break;
    default:
      *it = junk(g);
  }
}

// The text of `doc` with a few bytes flipped, cut or inserted.
std::string garble(testing::Generator& g, std::string text) {
  const size_t edits = 1 + g.below(4);
  for (size_t e = 0; e < edits && !text.empty(); ++e) {
    const size_t at = g.below(text.size());
    switch (g.below(3)) {
      case 0:
        text[at] = char(g.below(256));
        break;
      case 1:
        text.resize(at);
        break;
      default:
        text.insert(at, 1, "{}[]\",:0-e\\"[g.below(12)]);
    }
  }
  return text;
}

struct Reader {
  const char* name;
  std::function<Status(const json&)> read;  // the reader's status, after the checks below
};

std::string text_of(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Reads `doc` with `read`; when it accepts, what it read must be accepted again once written,
// and written the same (compared as text: a device's free-form facts may hold a NaN).
template <class T>
Status read_twice(const json& doc, Result<T> (*read)(const json&), json (*write)(const T&)) {
  Result<T> first = read(doc);
  if (!first.ok()) return first.status();
  Result<T> again = read(write(*first));
  if (!again.ok()) {
    return internal_error("accepted, but not once written: " + again.status().message());
  }
  if (text_of(write(*again)) != text_of(write(*first))) {
    return internal_error("accepted, but reads back different once written");
  }
  return ok_status();
}

Result<EvalReport> read_report(const json& j) { return read_eval_report(j); }
Result<TrainingSettings> read_train(const json& j) { return read_training_settings(j); }
Result<EvaluationSettings> read_evaluate(const json& j) { return read_evaluation_settings(j); }
Result<CacheDirectives> read_cache(const json& j) { return read_cache_directives(j); }
Result<DeviceInfo> read_device(const json& j) { return read_device_info(j); }
Result<SecAggParams> read_params(const json& j) { return read_secagg_params(j); }
Result<SecAggPeerKeys> read_peer(const json& j) { return read_secagg_peer_keys(j); }
Result<SecAggCiphertext> read_ciphertext(const json& j) { return read_secagg_ciphertext(j); }
Result<SecAggShare> read_share(const json& j) { return read_secagg_share(j); }

const std::vector<Reader>& readers() {
  static const std::vector<Reader> all = {
      {"eval_report", [](const json& d) { return read_twice(d, read_report, write_eval_report); }},
      {"update_meta",
       [](const json& d) { return read_twice(d, read_update_meta, write_update_meta); }},
      {"train", [](const json& d) { return read_twice(d, read_train, write_training_settings); }},
      {"evaluate",
       [](const json& d) { return read_twice(d, read_evaluate, write_evaluation_settings); }},
      {"cache", [](const json& d) { return read_twice(d, read_cache, write_cache_directives); }},
      {"task_offer",
       [](const json& d) { return read_twice(d, read_task_offer, write_task_offer); }},
      {"device", [](const json& d) { return read_twice(d, read_device, write_device_info); }},
      {"registration",
       [](const json& d) { return read_twice(d, read_registration, write_registration); }},
      {"registration_reply",
       [](const json& d) {
         return read_twice(d, read_registration_reply, write_registration_reply);
       }},
      {"task_status",
       [](const json& d) { return read_twice(d, read_task_status, write_task_status); }},
      {"error", [](const json& d) { return read_twice(d, read_error_reply, write_error_reply); }},
      {"secagg_params",
       [](const json& d) { return read_twice(d, read_params, write_secagg_params); }},
      {"secagg_advertise_keys",
       [](const json& d) {
         return read_twice(d, read_secagg_advertise_keys, write_secagg_advertise_keys);
       }},
      {"secagg_peer_keys",
       [](const json& d) { return read_twice(d, read_peer, write_secagg_peer_keys); }},
      {"secagg_graph",
       [](const json& d) { return read_twice(d, read_secagg_graph, write_secagg_graph); }},
      {"secagg_key_list",
       [](const json& d) { return read_twice(d, read_secagg_key_list, write_secagg_key_list); }},
      {"secagg_ciphertext",
       [](const json& d) { return read_twice(d, read_ciphertext, write_secagg_ciphertext); }},
      {"secagg_shares",
       [](const json& d) { return read_twice(d, read_secagg_shares, write_secagg_shares); }},
      {"secagg_forwarded_shares",
       [](const json& d) {
         return read_twice(d, read_secagg_forwarded_shares, write_secagg_forwarded_shares);
       }},
      {"secagg_masked_input",
       [](const json& d) {
         return read_twice(d, read_secagg_masked_input, write_secagg_masked_input);
       }},
      {"secagg_unmask_request",
       [](const json& d) {
         return read_twice(d, read_secagg_unmask_request, write_secagg_unmask_request);
       }},
      {"secagg_share", [](const json& d) { return read_twice(d, read_share, write_secagg_share); }},
      {"secagg_unmask_response",
       [](const json& d) {
         return read_twice(d, read_secagg_unmask_response, write_secagg_unmask_response);
       }},
  };
  return all;
}

// A valid message of a random kind, as its writer writes it.
json valid_document(testing::Generator& g) {
  switch (g.below(23)) {
    case 0:
      return write_eval_report(g.eval_report());
    case 1:
      return write_update_meta(g.update_meta());
    case 2:
      return write_training_settings(g.training_settings());
    case 3:
      return write_evaluation_settings({g.count()});
    case 4:
      return write_cache_directives(g.cache_directives());
    case 5:
      return write_task_offer(g.task_offer());
    case 6:
      return write_device_info(g.device_info());
    case 7:
      return write_registration(g.registration());
    case 8:
      return write_registration_reply(g.registration_reply());
    case 9:
      return write_task_status(g.task_status());
    case 10:
      return write_secagg_params(g.secagg_params());
    case 11:
      return write_secagg_advertise_keys(g.secagg_advertise_keys());
    case 12:
      return write_secagg_peer_keys(g.secagg_peer_keys(g.count()));
    case 13:
      return write_secagg_key_list(g.secagg_key_list());
    case 14:
      return write_secagg_ciphertext(g.secagg_ciphertext(g.count()));
    case 15:
      return write_secagg_shares(g.secagg_shares());
    case 16:
      return write_secagg_forwarded_shares(g.secagg_forwarded_shares());
    case 17:
      return write_secagg_masked_input(g.secagg_masked_input());
    case 18:
      return write_secagg_unmask_request(g.secagg_unmask_request());
    case 19:
      return write_secagg_share(g.secagg_share(g.count()));
    case 20:
      return write_secagg_unmask_response(g.secagg_unmask_response());
    case 21:
      return write_secagg_graph(g.secagg_graph());
    default:
      return write_error_reply(g.error_reply());
  }
}

// Every reader gives `doc` a value or a clear Status, never an exception. Returns how many
// readers accepted it.
size_t check_every_reader(const json& doc) {
  size_t accepted = 0;
  for (const Reader& reader : readers()) {
    CAPTURE(reader.name);
    Status s;
    CHECK_NOTHROW(s = reader.read(doc));
    CHECK_MESSAGE(s.code() != Code::kInternal, s.message());
    if (!s.ok()) {
      CHECK((s.code() == Code::kInvalidArgument || s.code() == Code::kUnprocessable));
      CHECK_FALSE(s.message().empty());
    }
    accepted += s.ok();
  }
  return accepted;
}

TEST_CASE("mutated messages give every reader a value or a Status, never an exception") {
  size_t accepted = 0;
  for (uint64_t seed = 1; seed <= kDocuments; ++seed) {
    CAPTURE(seed);
    testing::Generator g(seed);
    json doc = valid_document(g);
    const size_t mutations = 1 + g.below(4);
    for (size_t m = 0; m < mutations; ++m) mutate(g, doc);
    accepted += check_every_reader(doc) > 0;
  }
  // Not all junk: some mutations (an unknown member, an optional one dropped) still read.
  CHECK(accepted > 0);
  CHECK(accepted < kDocuments);
}

TEST_CASE("garbled message text gives a Status at the JSON parse or at every reader") {
  for (uint64_t seed = 1; seed <= kDocuments; ++seed) {
    CAPTURE(seed);
    testing::Generator g(seed);
    const std::string text = garble(g, valid_document(g).dump());
    Result<json> parsed = invalid_argument("not parsed");
    CHECK_NOTHROW(parsed = parse_untrusted_json(text));
    if (parsed.ok()) check_every_reader(*parsed);
  }
}

TEST_CASE("a task of a protocol version this SDK does not read is refused, naming both") {
  testing::Generator g(7);
  for (uint64_t version : {uint64_t(0), uint64_t(kProtocolVersion) + 1, uint64_t(99)}) {
    json task = write_task_offer(g.task_offer());
    task["protocol_version"] = version;
    task.erase("train");  // the version is judged first
    Result<TaskOffer> read = read_task_offer(task);
    REQUIRE_FALSE(read.ok());
    CHECK(read.status().code() == Code::kUnprocessable);
    CHECK(read.status().message().find("protocol version " + std::to_string(version)) !=
          std::string::npos);
    CHECK(read.status().message().find("protocol version " + std::to_string(kProtocolVersion)) !=
          std::string::npos);
  }
}

}  // namespace
}  // namespace fedcase::protocol
