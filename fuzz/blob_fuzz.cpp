// Fuzzes view_blob and decode_blob (common/blob.h), the decoders of every uploaded update and
// stored model.
// Input: the bytes of a blob. Each input is decoded twice: as it is (so the checksum check
// runs), and with its last four bytes replaced by the right CRC-32 (so mutations reach the
// success path instead of stopping at the checksum). A float32 blob of the current format that
// decodes must encode back to exactly the same bytes (the format has one encoding per blob);
// one of format 1, or compressed (8-bit, sparse), must encode to a float32 blob that decodes to
// the same model. The view's first non-finite value must be the one a plain scan of the
// decoded values finds.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/blob.h"
#include "fuzz/fuzz_target.h"

namespace {

constexpr size_t kMaxBytes = 1 << 20;

void decode_and_check(std::string_view bytes) {
  auto blob = fedcase::decode_blob(bytes, kMaxBytes);
  if (!blob.ok()) return;
  if (blob->data.size() != blob->layout.element_count()) {
    fedcase::fuzz::fuzz_fail("decoded data size differs from the layout's element count");
  }
  const std::string encoded = fedcase::encode_blob(*blob);
  uint32_t format = 0, encoding = 0;
  std::memcpy(&format, bytes.data() + 4, sizeof(format));
  std::memcpy(&encoding, bytes.data() + 16, sizeof(encoding));
  if (format == fedcase::kBlobFormatVersion &&
      encoding == uint32_t(fedcase::ValueEncoding::kFloat32) && encoded != bytes) {
    fedcase::fuzz::fuzz_fail("a decoded blob does not encode back to its bytes");
  }
  auto again = fedcase::decode_blob(encoded, kMaxBytes);
  if (!again.ok() || again->layout != blob->layout || again->model_version != blob->model_version ||
      std::memcmp(again->data.data(), blob->data.data(), blob->data.size() * sizeof(float)) != 0) {
    fedcase::fuzz::fuzz_fail("a decoded blob, encoded, does not decode to the same model");
  }
  fedcase::BlobView view;
  if (!fedcase::view_blob(bytes, kMaxBytes, view).ok()) {
    fedcase::fuzz::fuzz_fail("a blob that decodes does not view");
  }
  const auto bad =
      std::find_if(blob->data.begin(), blob->data.end(), [](float v) { return !std::isfinite(v); });
  if (view.first_non_finite != size_t(bad - blob->data.begin())) {
    fedcase::fuzz::fuzz_fail("the view's first non-finite value is not the first one");
  }
}

}  // namespace

FEDCASE_FUZZ_TARGET(blob) {
  const std::string_view bytes = fedcase::fuzz::as_text(data, size);
  decode_and_check(bytes);
  if (size < sizeof(uint32_t)) return 0;
  std::string sealed(bytes);
  const uint32_t crc = fedcase::crc32_of(bytes.substr(0, size - sizeof(uint32_t)));
  std::memcpy(sealed.data() + size - sizeof(uint32_t), &crc, sizeof(crc));
  if (sealed != bytes) decode_and_check(sealed);
  return 0;
}
