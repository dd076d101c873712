#include "secagg/partial.h"

#include <nlohmann/json.hpp>
#include <set>

namespace fedcase::secagg {
namespace {

constexpr size_t kLengthBytes = 8;

}  // namespace

MaskedPartial::MaskedPartial(uint64_t words, uint32_t word_bytes, size_t threads)
    : words_(words),
      word_bytes_(word_bytes),
      pool_(std::make_unique<aggregation::WorkerPool>(threads)) {
  if (word_bytes_ <= 4) {
    sum32_.assign(words_, 0);
  } else {
    sum64_.assign(words_, 0);
  }
}

Status MaskedPartial::fold(const protocol::SecAggMaskedInput& header, std::string_view body) {
  if (body.size() != words_ * word_bytes_) {
    return invalid_argument("a masked vector of " + std::to_string(words_) + " words of " +
                            std::to_string(word_bytes_) + " bytes is expected");
  }
  FEDCASE_RETURN_IF_ERROR(word_bytes_ <= 4 ? fold_words(sum32_, body, word_bytes_, *pool_)
                                           : fold_words(sum64_, body, word_bytes_, *pool_));
  inputs_.emplace_back(header.client, header.refused_shares);
  return ok_status();
}

std::string MaskedPartial::encode() const {
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& [client, refused] : inputs_) inputs.push_back({client, refused});
  const std::string header = nlohmann::json{{"inputs", inputs}}.dump();
  std::string out(kLengthBytes, '\0');
  const uint64_t length = header.size();
  for (size_t i = 0; i < kLengthBytes; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  out += header;
  out += word_bytes_ <= 4 ? pack_words(sum32_, word_bytes_) : pack_words(sum64_, word_bytes_);
  return out;
}

Result<DecodedPartial> decode_masked_partial(std::string_view bytes, uint64_t words,
                                             uint32_t word_bytes) {
  const auto malformed = [](const std::string& why) {
    return invalid_argument("malformed masked partial: " + why);
  };
  if (bytes.size() < kLengthBytes) return malformed("too short");
  uint64_t length = 0;
  for (size_t i = 0; i < kLengthBytes; ++i) {
    length |= uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  const uint64_t sum_bytes = words * word_bytes;
  if (length > bytes.size() - kLengthBytes || bytes.size() - kLengthBytes - length != sum_bytes) {
    return malformed("its length does not match " + std::to_string(words) + " words of " +
                     std::to_string(word_bytes) + " bytes");
  }
  const auto header = nlohmann::json::parse(bytes.substr(kLengthBytes, length), nullptr, false);
  if (!header.is_object() || !header.contains("inputs") || !header["inputs"].is_array()) {
    return malformed("no list of inputs");
  }
  DecodedPartial out;
  std::set<ClientId> senders;
  for (const auto& input : header["inputs"]) {
    if (!input.is_array() || input.size() != 2 || !input[0].is_number_unsigned() ||
        !input[1].is_array()) {
      return malformed("an input is not [client, [refused, ...]]");
    }
    PartialInput parsed{input[0].get<ClientId>(), {}};
    for (const auto& refused : input[1]) {
      if (!refused.is_number_unsigned()) return malformed("a refused share is not a client id");
      parsed.second.push_back(refused.get<ClientId>());
    }
    if (!senders.insert(parsed.first).second) return malformed("a sender appears twice");
    out.inputs.push_back(std::move(parsed));
  }
  if (out.inputs.empty()) return malformed("no input");
  out.sum = bytes.substr(kLengthBytes + length);
  return out;
}

}  // namespace fedcase::secagg
