#include "common/blob.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

using namespace fedcase;

namespace {

ModelBlob sample_blob() {
  ModelBlob b;
  b.model_version = 42;
  b.layout.tensors = {{"w", {2, 3}}, {"b", {3}}};
  b.data = {1, 2, 3, 4, 5, 6, -1.5f, 0.25f, 1e-7f};
  return b;
}

// Rewrites the trailing CRC so a deliberate corruption tests the field checks, not the CRC.
void reseal(std::string& bytes) {
  uint32_t crc = crc32_of(std::string_view(bytes).substr(0, bytes.size() - 4));
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
}

}  // namespace

TEST_CASE("blob round-trips exactly") {
  ModelBlob b = sample_blob();
  std::string bytes = encode_blob(b);
  auto decoded = decode_blob(bytes, 1 << 20);
  REQUIRE(decoded.ok());
  CHECK(decoded->model_version == 42);
  CHECK(decoded->layout == b.layout);
  CHECK(decoded->data == b.data);
  CHECK(decoded->layout.element_count() == 9);
  CHECK(decoded->layout.describe() == "w[2,3], b[3]");
  CHECK(blob_checksum(bytes) == blob_checksum(encode_blob(*decoded)));
  CHECK(blob_checksum(bytes).size() == 64);
}

TEST_CASE("a blob view checks the blob and reads its values where they lie") {
  const std::string bytes = encode_blob(sample_blob());
  BlobView view;
  view.layout.tensors = {{"old", {9, 9}}, {"x", {1}}, {"y", {2}}};  // replaced
  REQUIRE(view_blob(bytes, 1 << 20, view).ok());
  CHECK(view.model_version == 42);
  CHECK(view.layout == sample_blob().layout);
  REQUIRE(view.count == 9);
  CHECK(view.first_non_finite == 9);  // all finite
  // The values are the blob's own bytes (here at an odd offset), not a copy.
  const char* at = reinterpret_cast<const char*>(view.values);
  CHECK(at == bytes.data() + bytes.size() - 4 - 9 * sizeof(float));
  CHECK(std::vector<float>(view.values, view.values + view.count) == sample_blob().data);
  CHECK(view_blob("FCMB junk", 1 << 20, view).code() == Code::kInvalidArgument);
}

TEST_CASE("first_non_finite finds the first NaN or infinity wherever it is") {
  std::vector<float> values(9000, 1.5f);
  CHECK(first_non_finite(values.data(), values.size()) == values.size());
  CHECK(first_non_finite(values.data(), 0) == 0);
  // Before, at and after block boundaries (1024 and 4096 values), in the tail, and with two.
  for (size_t at : {0u, 1u, 1023u, 1024u, 1025u, 4095u, 4096u, 8191u, 8999u}) {
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> v = values;
      v[at] = bad;
      CHECK(first_non_finite(v.data(), v.size()) == at);
      if (at + 7 < v.size()) v[at + 7] = NAN;
      CHECK(first_non_finite(v.data(), v.size()) == at);
      CHECK_FALSE(all_finite(v));
      // A view finds it in the same pass as the checksum, across its blocks of 4096 values;
      // a bad checksum still wins over a non-finite value.
      std::string bytes = encode_blob({1, {{{"v", {v.size()}}}}, v});
      BlobView view;
      REQUIRE(view_blob(bytes, 1 << 20, view).ok());
      CHECK(view.first_non_finite == at);
      bytes[bytes.size() - 1] ^= 1;
      CHECK(view_blob(bytes, 1 << 20, view).code() == Code::kInvalidArgument);
    }
  }
  values[5] = 3.4e38f;  // the largest floats and subnormals are finite
  values[6] = 1e-45f;
  values[7] = -0.0f;
  CHECK(all_finite(values));
}

TEST_CASE("blob parser rejects every truncation") {
  std::string bytes = encode_blob(sample_blob());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = decode_blob(std::string_view(bytes).substr(0, n), 1 << 20);
    CHECK_FALSE(r.ok());
  }
}

TEST_CASE("blob parser rejects corruption, trailing bytes and oversize input") {
  std::string bytes = encode_blob(sample_blob());

  std::string flipped = bytes;
  flipped[bytes.size() - 10] ^= 0x40;  // a data byte
  auto r = decode_blob(flipped, 1 << 20);
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message().find("checksum") != std::string::npos);

  std::string magic = bytes;
  magic[0] = 'X';
  CHECK(decode_blob(magic, 1 << 20).status().message().find("magic") != std::string::npos);

  std::string trailing = bytes;
  trailing.insert(trailing.size() - 4, "xx");
  reseal(trailing);
  CHECK(decode_blob(trailing, 1 << 20).status().message().find("trailing") != std::string::npos);

  CHECK(decode_blob(bytes, bytes.size() - 1).status().code() == Code::kTooLarge);

  std::string wrong_count = bytes;
  // element count sits right before the data: 9 floats + crc from the end
  size_t count_at = bytes.size() - 4 - 9 * 4 - 8;
  uint64_t ten = 10;
  std::memcpy(wrong_count.data() + count_at, &ten, 8);
  reseal(wrong_count);
  CHECK(decode_blob(wrong_count, 1 << 20).status().message().find("does not match") !=
        std::string::npos);
}

TEST_CASE("blob parser bounds huge declared shapes before allocating") {
  ModelBlob b;
  b.layout.tensors = {{"huge", {1ull << 40, 1ull << 30}}};
  std::string bytes = encode_blob(b);  // header declares far more data than present
  auto r = decode_blob(bytes, 1 << 20);
  CHECK(r.status().code() == Code::kInvalidArgument);  // malformed, not over the size limit
  CHECK(r.status().message().find("more elements than") != std::string::npos);
}

TEST_CASE("the first difference between two layouts is named for people") {
  const ModelLayout a{{{"w", {2, 3}}, {"b", {3}}}};
  CHECK(a.first_difference(a).empty());
  CHECK(a.first_difference({{{"w", {3, 2}}, {"b", {3}}}}) ==
        "tensor 'w' is [2,3] here and [3,2] there");
  CHECK(a.first_difference({{{"v", {2, 3}}, {"b", {3}}}}) == "tensor 'v' comes where 'w' is here");
  CHECK(a.first_difference({{{"w", {2, 3}}}}) == "there is no tensor 'b'");
  CHECK(a.first_difference({{{"w", {2, 3}}, {"b", {3}}, {"c", {1}}}}) ==
        "tensor 'c' is only there");
}

TEST_CASE("a blob carries each tensor's kind, parameters before buffers") {
  ModelBlob b;
  b.layout.tensors = {{"w", {2}, TensorKind::kParameter},
                      {"bn.running_var", {2}, TensorKind::kFloatBuffer},
                      {"bn.num_batches_tracked", {}, TensorKind::kIntegerBuffer}};
  b.data = {0.5f, -1, 2, 3, 7};
  CHECK(b.layout.parameter_count() == 2);
  CHECK(b.layout.element_count() == 5);
  std::string bytes = encode_blob(b);
  auto decoded = decode_blob(bytes, 1 << 20);
  REQUIRE(decoded.ok());
  CHECK(decoded->layout == b.layout);
  CHECK(decoded->data == b.data);

  // A layout that differs only in a kind is another layout, and says so.
  ModelLayout parameters_only = b.layout;
  parameters_only.tensors[1].kind = TensorKind::kParameter;
  CHECK(parameters_only != b.layout);
  CHECK(b.layout.first_difference(parameters_only) ==
        "tensor 'bn.running_var' is a float buffer here and a parameter there");

  // Byte offset of tensor i's kind: header (24), then per tensor name, rank, dims, kind.
  const size_t w_kind = 24 + 2 + 1 + 4 + 8;
  const size_t var_kind = w_kind + 1 + 2 + 14 + 4 + 8;
  REQUIRE(bytes[w_kind] == 0);
  REQUIRE(bytes[var_kind] == 1);
  std::string unknown = bytes;
  unknown[var_kind] = 3;
  reseal(unknown);
  CHECK(decode_blob(unknown, 1 << 20).status().message().find("unknown kind 3") !=
        std::string::npos);
  std::string out_of_order = bytes;
  out_of_order[w_kind] = 1;  // w a buffer: the parameter after it comes too late
  out_of_order[var_kind] = 0;
  reseal(out_of_order);
  CHECK(decode_blob(out_of_order, 1 << 20).status().message() ==
        "parameter bn.running_var comes after a buffer");
}

TEST_CASE("blobs of format version 1 (no kinds) are read as parameters") {
  // sample_blob() as format 1 wrote it: version 1, no kind byte after each tensor's dims.
  std::string bytes = encode_blob(sample_blob());
  bytes[4] = 1;
  const size_t w_kind = 24 + 2 + 1 + 4 + 2 * 8;
  const size_t b_kind = w_kind + 1 + 2 + 1 + 4 + 8;
  bytes.erase(b_kind, 1);
  bytes.erase(w_kind, 1);
  reseal(bytes);
  auto decoded = decode_blob(bytes, 1 << 20);
  REQUIRE_MESSAGE(decoded.ok(), decoded.status().to_string());
  CHECK(decoded->layout == sample_blob().layout);
  CHECK(decoded->data == sample_blob().data);
}
