#include "common/blob.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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

TEST_CASE("a float32 blob starts with its layout's header; its CRC can be taken piece by piece") {
  const ModelBlob b = sample_blob();
  const std::string bytes = encode_blob(b);
  const std::string header = float_blob_header(b.layout, b.model_version);
  CHECK(header.size() == blob_values_offset(b.layout));
  CHECK(bytes.compare(0, header.size(), header) == 0);
  CHECK(float_blob_header(b.layout, 43) != header);
  const std::string_view body = std::string_view(bytes).substr(0, bytes.size() - 4);
  uint32_t sealed = 0;
  std::memcpy(&sealed, bytes.data() + body.size(), sizeof(sealed));
  CHECK(crc32_of(body.substr(5), crc32_of(body.substr(0, 5))) == sealed);
}

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

TEST_CASE("8-bit blobs decode within one step of every value, unbiased, in 0.26x the bytes") {
  ModelBlob b;
  b.model_version = 5;
  const size_t n = 10000;
  b.layout.tensors = {{"w", {n}}};
  for (size_t i = 0; i < n; ++i) b.data.push_back(std::sin(float(i)) * float(1 + i % 7));
  const std::string bytes = encode_blob_quantized(b, 256, 17);
  CHECK(double(bytes.size()) <= 0.26 * double(encode_blob(b).size()));
  CHECK(bytes == encode_blob_quantized(b, 256, 17));  // the seed fixes the rounding
  BlobView view;
  REQUIRE(view_blob(bytes, 1 << 20, view).ok());
  CHECK(view.encoding == ValueEncoding::kQuantized8);
  CHECK(view.values == nullptr);
  CHECK(view.first_non_finite == n);
  auto decoded = decode_blob(bytes, 1 << 20);
  REQUIRE(decoded.ok());
  CHECK(decoded->layout == b.layout);
  CHECK(decoded->model_version == 5);
  for (size_t block = 0; block * 256 < n; ++block) {
    const auto first = b.data.begin() + block * 256;
    const auto last = b.data.begin() + std::min(n, (block + 1) * 256);
    const float step = (*std::max_element(first, last) - *std::min_element(first, last)) / 255;
    for (size_t i = block * 256; i < std::min(n, (block + 1) * 256); ++i) {
      REQUIRE(std::fabs(decoded->data[i] - b.data[i]) <= step * 1.0001f);
    }
  }
  // Unbiased: over 200 seeds the mean decoded value approaches the value (the error of one
  // draw has a standard deviation of at most step / 2, the mean's / sqrt(200)).
  std::vector<double> sum(n, 0.0);
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto d = decode_blob(encode_blob_quantized(b, 256, seed), 1 << 20);
    for (size_t i = 0; i < n; ++i) sum[i] += d->data[i];
  }
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(sum[i] / 200 - b.data[i]));
  CHECK(worst < 0.01);
  // A partial range decodes as the whole does.
  std::vector<float> part(300);
  decode_values(view, 1000, 1300, part.data());
  CHECK(std::equal(part.begin(), part.end(), decoded->data.begin() + 1000));
}

TEST_CASE("sparse blobs hold the chosen values and zero elsewhere; malformed ones are refused") {
  ModelBlob b = sample_blob();
  const std::string bytes = encode_blob_sparse(b, {1, 4, 8});
  auto decoded = decode_blob(bytes, 1 << 20);
  REQUIRE(decoded.ok());
  CHECK(decoded->data == std::vector<float>{0, 2, 0, 0, 5, 0, 0, 0, 1e-7f});
  BlobView view;
  REQUIRE(view_blob(bytes, 1 << 20, view).ok());
  std::vector<float> part(4);
  decode_values(view, 3, 7, part.data());
  CHECK(part == std::vector<float>{0, 5, 0, 0});
  // After the header (layout, element count): u64 stored count, then the u32 indices.
  const size_t indices_at = bytes.size() - 4 - 3 * 8;
  auto refused = [&](std::string corrupt, const std::string& words) {
    reseal(corrupt);
    Status s = view_blob(corrupt, 1 << 20, view);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find(words) != std::string::npos);
  };
  std::string unordered = bytes;
  unordered[indices_at + 4] = 1;  // 1, 1, 8
  refused(unordered, "not above the one before");
  std::string past = bytes;
  past[indices_at + 8] = 9;  // index 9 of 9 values
  refused(past, "past the end");
  std::string too_many = bytes;
  too_many[indices_at - 8] = 10;
  refused(too_many, "more values than it holds");
  // A non-finite stored value is found where it decodes.
  ModelBlob bad = b;
  bad.data[4] = std::nanf("");
  REQUIRE(view_blob(encode_blob_sparse(bad, {1, 4}), 1 << 20, view).ok());
  CHECK(view.first_non_finite == 4);
  // An 8-bit block with an infinite step is non-finite from its first value.
  std::string q8 = encode_blob_quantized(b, 4, 1);
  REQUIRE(view_blob(q8, 1 << 20, view).ok());
  const size_t scales_at = q8.size() - 4 - 9 - 3 * 8;
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(q8.data() + scales_at + 8 + 4, &inf, sizeof(inf));  // block 1's step
  reseal(q8);
  REQUIRE(view_blob(q8, 1 << 20, view).ok());
  CHECK(view.first_non_finite == 4);
  std::string block0 = encode_blob_quantized(b, 4, 1);
  std::memset(block0.data() + scales_at - 4, 0, 4);  // block size 0
  reseal(block0);
  CHECK(view_blob(block0, 1 << 20, view).message().find("block size 0") != std::string::npos);
}
