// The secure-aggregation messages' own rules: canonical base64, exact key lengths, distinct and
// ordered client lists, the parameters' ranges, and the masked vector's length check.

#include "protocol/secagg.h"

#include <doctest/doctest.h>

#include <string>

#include "protocol/base64.h"
#include "tests/protocol/generators.h"

namespace fedcase::protocol {
namespace {

using nlohmann::json;

TEST_CASE("base64 reads back every byte string and refuses every other spelling") {
  testing::Generator g(3);
  for (int i = 0; i < 2000; ++i) {
    const std::string bytes = g.bytes(0, 70);
    const std::string text = encode_base64(bytes);
    CHECK(text.size() == (bytes.size() + 2) / 3 * 4);
    REQUIRE(decode_base64(text) == bytes);
  }
  CHECK(encode_base64("fedcase") == "ZmVkY2FzZQ==");  // RFC 4648 alphabet and padding
  CHECK(decode_base64("ZmVkY2FzZQ==") == std::string("fedcase"));
  for (const char* bad : {"ZmVkY2FzZQ", "ZmVkY2FzZR==", "ZmVk Y2Fz", "Zm=kY2Fz",
                          "ZmVkY2Fz====", "ZmVkY2F-", "====", "Zg=A"}) {
    CAPTURE(bad);
    CHECK_FALSE(decode_base64(bad).has_value());
  }
}

TEST_CASE("secure-aggregation readers refuse what breaks their rules, naming the field") {
  testing::Generator g(5);
  const json keys = write_secagg_advertise_keys(g.secagg_advertise_keys());
  json bad = keys;
  bad["mask_public_key"] = encode_base64(std::string(31, 'k'));
  Result<SecAggAdvertiseKeys> read = read_secagg_advertise_keys(bad);
  REQUIRE_FALSE(read.ok());
  CHECK(read.status().message().find("mask_public_key must be base64 of 32 bytes") !=
        std::string::npos);
  bad = keys;
  bad["cipher_public_key"] = std::string(keys["cipher_public_key"]).substr(1) + "A";
  CHECK_FALSE(read_secagg_advertise_keys(bad).ok());  // not canonical / wrong length
  bad = keys;
  bad["round"] = 0;
  CHECK_FALSE(read_secagg_advertise_keys(bad).ok());

  SecAggGraph graph = g.secagg_graph();
  graph.participants = {3, 5, 9};
  json unsorted = write_secagg_graph(graph);
  unsorted["participants"] = {5, 3, 9};
  CHECK_FALSE(read_secagg_graph(unsorted).ok());
  unsorted["participants"] = {3, 3, 9};
  CHECK_FALSE(read_secagg_graph(unsorted).ok());
  unsorted["participants"] = {3, -5, 9};
  CHECK_FALSE(read_secagg_graph(unsorted).ok());
  graph.params.threshold = graph.params.degree + 1;
  CHECK(read_secagg_graph(write_secagg_graph(graph))
            .status()
            .message()
            .find("threshold must be at most degree") != std::string::npos);
  SecAggKeyList list = g.secagg_key_list();
  list.neighbours = {{4, std::string(32, 'a'), std::string(32, 'b')},
                     {4, std::string(32, 'c'), std::string(32, 'd')}};
  CHECK_FALSE(read_secagg_key_list(write_secagg_key_list(list)).ok());  // a neighbour twice

  SecAggShares shares = g.secagg_shares();
  shares.shares = {{7, "a"}, {7, "b"}};
  CHECK(read_secagg_shares(write_secagg_shares(shares))
            .status()
            .message()
            .find("must not repeat a client") != std::string::npos);
  shares.shares = {{7, std::string(kMaxSecAggBlobBytes + 1, 'c')}};
  CHECK_FALSE(read_secagg_shares(write_secagg_shares(shares)).ok());
  shares.shares = {{7, ""}};
  CHECK_FALSE(read_secagg_shares(write_secagg_shares(shares)).ok());

  json masked = write_secagg_masked_input({1, 2, 3, 11, 4, {}});
  masked["word_bytes"] = 9;
  CHECK_FALSE(read_secagg_masked_input(masked).ok());
  masked["word_bytes"] = 0;
  CHECK_FALSE(read_secagg_masked_input(masked).ok());
  masked["word_bytes"] = 3;  // a 17- to 24-bit modulus
  CHECK(read_secagg_masked_input(masked).ok());
  masked["word_bytes"] = 8;
  masked["words"] = 1;
  CHECK_FALSE(read_secagg_masked_input(masked).ok());

  json request = write_secagg_unmask_request({1, 2, {4, 5}, {6}});
  request["dropped"] = {6, 6};
  CHECK_FALSE(read_secagg_unmask_request(request).ok());
  json too_many = write_secagg_unmask_request({1, 2, {}, {}});
  too_many["survivors"] = json::array();
  for (size_t i = 0; i <= kMaxSecAggClients; ++i) too_many["survivors"].push_back(i);
  CHECK_FALSE(read_secagg_unmask_request(too_many).ok());
}

TEST_CASE("a masked vector's body must be exactly what its header announces") {
  SecAggMaskedInput header{1, 2, 3, 11, 4, {}};
  CHECK(check_masked_vector(header, 44).ok());
  CHECK(check_masked_vector(header, 43).code() == Code::kUnprocessable);
  CHECK(check_masked_vector(header, 88).code() == Code::kUnprocessable);
  header.word_bytes = 8;
  CHECK(check_masked_vector(header, 88).ok());
  header.word_bytes = 3;
  CHECK(check_masked_vector(header, 33).ok());
  header.word_bytes = 9;
  CHECK(check_masked_vector(header, 99).code() == Code::kInvalidArgument);
  header.word_bytes = 8;
  header.words = UINT64_MAX;  // words x word_bytes overflows: never equal to a body size
  CHECK(check_masked_vector(header, 8).code() == Code::kUnprocessable);
}

}  // namespace
}  // namespace fedcase::protocol
