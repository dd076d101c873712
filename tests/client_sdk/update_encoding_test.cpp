// A session's update encodings (client_sdk/update_encoding.h): 8-bit and top-k with error
// feedback, as the coordinator decodes them.

#include "client_sdk/update_encoding.h"

#include <doctest/doctest.h>

#include <cmath>

using namespace fedcase;
using namespace fedcase::client;

TEST_CASE("top_k_indices picks the largest magnitudes, lower index on a tie, in order") {
  CHECK(top_k_indices({0.5f, -3, 2, 0, 3, -0.1f}, 3) == std::vector<uint32_t>{1, 2, 4});
  CHECK(top_k_indices({1, 1, 1}, 2) == std::vector<uint32_t>{0, 1});
  CHECK(top_k_indices({1, 2}, 5) == std::vector<uint32_t>{0, 1});
}

TEST_CASE("top-k sends every value eventually: what is not sent waits for the job's next update") {
  const ModelLayout layout{{{"w", {10}}}};
  UpdateEncoder encoder(1);
  const protocol::Compression top{"top_k", 256, 0.2};  // 2 of 10 values an update
  std::vector<float> total_sent(10, 0), total_delta(10, 0);
  std::string body_of_top;
  for (int round = 0; round < 6; ++round) {
    std::vector<float> delta(10);
    for (int i = 0; i < 10; ++i) delta[i] = float((i * 7 + round * 3) % 11) - 5.0f;
    for (int i = 0; i < 10; ++i) total_delta[i] += delta[i];
    const std::string body = encoder.encode(4, round, layout, delta, top);
    body_of_top = body;
    auto sent = decode_blob(body, 1 << 20);
    REQUIRE(sent.ok());
    CHECK(std::count_if(sent->data.begin(), sent->data.end(), [](float v) { return v != 0; }) <= 2);
    for (int i = 0; i < 10; ++i) total_sent[i] += sent->data[i];
  }
  // Sent plus the residual left is what was trained: flush it with a zero update of a large k.
  const std::string rest =
      encoder.encode(4, 6, layout, std::vector<float>(10, 0.0f), protocol::Compression{"top_k", 256, 1.0});
  auto flushed = decode_blob(rest, 1 << 20);
  for (int i = 0; i < 10; ++i) {
    CHECK(total_sent[i] + flushed->data[i] == doctest::Approx(total_delta[i]));
  }
  // Another job has its own residual; no compression sends float32 as it is.
  auto other = decode_blob(encoder.encode(5, 0, layout, std::vector<float>(10, 1.0f), std::nullopt),
                           1 << 20);
  CHECK(other->data == std::vector<float>(10, 1.0f));
  // 8-bit: within one step of the block's range.
  std::vector<float> delta(10);
  for (int i = 0; i < 10; ++i) delta[i] = float(i) / 3;
  const std::string q8_body = encoder.encode(5, 1, layout, delta, protocol::Compression{});
  auto q8 = decode_blob(q8_body, 1 << 20);
  for (int i = 0; i < 10; ++i) CHECK(std::fabs(q8->data[i] - delta[i]) <= 3.0f / 255 + 1e-6f);
  // What a simulated client uploads is what a real one does.
  CHECK(update_body_bytes(layout, protocol::Compression{}) == q8_body.size());
  CHECK(update_body_bytes(layout, top) == body_of_top.size());
  CHECK(update_body_bytes(layout, std::nullopt) == encode_blob({0, layout, delta}).size());
}
