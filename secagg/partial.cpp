#include "secagg/partial.h"

#include <nlohmann/json.hpp>
#include <set>

namespace fedcase::secagg {
namespace {

constexpr size_t kLengthBytes = 8;

}  // namespace

MaskedPartial::MaskedPartial(uint64_t words, uint32_t word_bytes, size_t threads,
                             size_t max_held)
    : words_(words),
      word_bytes_(word_bytes),
      max_held_(max_held),
      pool_(std::make_unique<aggregation::WorkerPool>(threads)) {
  if (word_bytes_ <= 4) {
    sum32_.assign(words_, 0);
  } else {
    sum64_.assign(words_, 0);
  }
}

Status check_room_to_hold(ClientId sender, const std::vector<ClientId>& refused,
                          const std::set<ClientId>& refused_before, size_t held, size_t max_held) {
  if (must_hold(sender, refused, refused_before) && held >= max_held) {
    return resource_exhausted("client " + std::to_string(sender) +
                              "'s input would be held whole (it refused a share, or its share "
                              "was refused), and " +
                              std::to_string(max_held) + " inputs are held already");
  }
  return ok_status();
}

Status MaskedPartial::can_take(const protocol::SecAggMaskedInput& header) const {
  return check_room_to_hold(header.client, header.refused_shares, refused_by_held_, held_.size(),
                            max_held_);
}

Status MaskedPartial::fold(const protocol::SecAggMaskedInput& header, std::string_view body) {
  if (body.size() != words_ * word_bytes_) {
    return invalid_argument("a masked vector of " + std::to_string(words_) + " words of " +
                            std::to_string(word_bytes_) + " bytes is expected");
  }
  FEDCASE_RETURN_IF_ERROR(can_take(header));
  if (must_hold(header.client, header.refused_shares, refused_by_held_)) {
    held_.push_back({header.client, header.refused_shares, std::string(body)});
    refused_by_held_.insert(header.refused_shares.begin(), header.refused_shares.end());
    return ok_status();
  }
  FEDCASE_RETURN_IF_ERROR(word_bytes_ <= 4 ? fold_words(sum32_, body, word_bytes_, *pool_)
                                           : fold_words(sum64_, body, word_bytes_, *pool_));
  folded_.push_back(header.client);
  return ok_status();
}

std::string MaskedPartial::encode() const {
  nlohmann::json held = nlohmann::json::array();
  for (const HeldInput& h : held_) held.push_back({h.client, h.refused});
  const std::string header = nlohmann::json{{"inputs", folded_}, {"held", held}}.dump();
  std::string out(kLengthBytes, '\0');
  const uint64_t length = header.size();
  for (size_t i = 0; i < kLengthBytes; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  out += header;
  out += word_bytes_ <= 4 ? pack_words(sum32_, word_bytes_) : pack_words(sum64_, word_bytes_);
  for (const HeldInput& h : held_) out += h.body;
  return out;
}

Result<DecodedPartial> decode_masked_partial(std::string_view bytes, uint64_t words,
                                             uint32_t word_bytes, size_t max_held) {
  const auto malformed = [](const std::string& why) {
    return invalid_argument("malformed masked partial: " + why);
  };
  if (bytes.size() < kLengthBytes) return malformed("too short");
  uint64_t length = 0;
  for (size_t i = 0; i < kLengthBytes; ++i) {
    length |= uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  if (length > bytes.size() - kLengthBytes) return malformed("its header runs past its end");
  const auto header = nlohmann::json::parse(bytes.substr(kLengthBytes, length), nullptr, false);
  if (!header.is_object() || !header.contains("inputs") || !header["inputs"].is_array() ||
      !header.contains("held") || !header["held"].is_array()) {
    return malformed("no lists of inputs");
  }
  DecodedPartial out;
  std::set<ClientId> senders;
  const auto new_sender = [&](const nlohmann::json& id) {
    return id.is_number_unsigned() && senders.insert(id.get<ClientId>()).second;
  };
  for (const auto& input : header["inputs"]) {
    if (!new_sender(input)) return malformed("an input's sender is not a new client id");
    out.folded.push_back(input.get<ClientId>());
  }
  if (header["held"].size() > max_held) {
    return malformed("more than " + std::to_string(max_held) + " inputs held");
  }
  for (const auto& input : header["held"]) {
    if (!input.is_array() || input.size() != 2 || !new_sender(input[0]) || !input[1].is_array()) {
      return malformed("a held input is not [new client, [refused, ...]]");
    }
    HeldInput held{input[0].get<ClientId>(), {}, {}};
    for (const auto& refused : input[1]) {
      if (!refused.is_number_unsigned()) return malformed("a refused share is not a client id");
      held.refused.push_back(refused.get<ClientId>());
    }
    out.held.push_back(std::move(held));
  }
  if (senders.empty()) return malformed("no input");
  const uint64_t vector_bytes = words * word_bytes;
  if (bytes.size() - kLengthBytes - length != vector_bytes * (1 + out.held.size())) {
    return malformed("its length does not match " + std::to_string(1 + out.held.size()) +
                     " vectors of " + std::to_string(words) + " words of " +
                     std::to_string(word_bytes) + " bytes");
  }
  std::string_view vectors = bytes.substr(kLengthBytes + length);
  out.sum = vectors.substr(0, vector_bytes);
  for (size_t i = 0; i < out.held.size(); ++i) {
    out.held[i].body = std::string(vectors.substr((1 + i) * vector_bytes, vector_bytes));
  }
  return out;
}

}  // namespace fedcase::secagg
