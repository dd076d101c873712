#include "secagg/masked_inputs.h"

#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

namespace fedcase::secagg {
namespace {

constexpr size_t kLengthBytes = 8;

std::string client_name(ClientId c) { return "client " + std::to_string(c); }

}  // namespace

MaskedSum::MaskedSum(uint64_t words, uint32_t word_bytes)
    : words_(words), word_bytes_(word_bytes) {
  visit([words](auto& sum) { sum.assign(words, 0); });
}

Status MaskedSum::add(std::string_view body, aggregation::WorkerPool& pool) {
  if (body.size() != words_ * word_bytes_) {
    return invalid_argument("a masked vector of " + std::to_string(words_) + " words of " +
                            std::to_string(word_bytes_) + " bytes is expected");
  }
  return visit([&](auto& sum) { return fold_words(sum, body, word_bytes_, pool); });
}

std::string MaskedSum::pack() const {
  return visit([&](const auto& sum) {
    std::string out(sum.size() * word_bytes_, '\0');
    for (size_t i = 0; i < sum.size(); ++i) {
      std::memcpy(out.data() + i * word_bytes_, &sum[i], word_bytes_);  // little-endian hosts
    }
    return out;
  });
}

std::vector<uint64_t> MaskedSum::words_mod(uint32_t bits) const {
  std::vector<uint64_t> out =
      visit([](const auto& sum) { return std::vector<uint64_t>(sum.begin(), sum.end()); });
  const uint64_t low_bits = bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
  for (uint64_t& w : out) w &= low_bits;
  return out;
}

size_t MaskedSum::memory_bytes() const {
  return sum32_.capacity() * sizeof(uint32_t) + sum64_.capacity() * sizeof(uint64_t);
}

std::set<ClientId> leave_out(const std::set<ClientId>& folded, const std::vector<HeldInput>& held) {
  std::set<ClientId> present = folded, held_ids, out;
  for (const HeldInput& input : held) held_ids.insert(input.client);
  present.insert(held_ids.begin(), held_ids.end());
  for (;;) {
    // The conflicts left: a held input that refused the share of a present one.
    std::map<ClientId, size_t> conflicts, refused;  // by held input in a conflict
    std::set<ClientId> against_folded;  // in a conflict with an input of the sum
    for (const HeldInput& input : held) {
      if (present.count(input.client) == 0) continue;
      for (ClientId other : input.refused) {
        if (present.count(other) == 0) continue;
        ++conflicts[input.client];
        if (held_ids.count(other) != 0) {
          ++conflicts[other];
          ++refused[other];
        } else {
          against_folded.insert(input.client);
        }
      }
    }
    if (conflicts.empty()) return out;
    // Leave out the one that must go (its conflict is with an input already summed), else
    // the one in most conflicts, else the one refused most, else the smallest id.
    const auto rank = [&](ClientId c) {
      return std::make_tuple(against_folded.count(c), conflicts[c], refused[c]);
    };
    ClientId worst = conflicts.begin()->first;
    for (const auto& entry : conflicts) {
      if (rank(entry.first) > rank(worst)) worst = entry.first;
    }
    out.insert(worst);
    present.erase(worst);
  }
}

MaskedInputs::Roster MaskedInputs::roster_of(
    const std::map<ClientId, protocol::SecAggForwardedShares>& forwarded) {
  Roster out;
  for (const auto& [client, message] : forwarded) {
    std::set<ClientId>& from = out[client];
    for (const protocol::SecAggCiphertext& share : message.shares) from.insert(share.client);
  }
  return out;
}

MaskedInputs::MaskedInputs(Roster roster, uint64_t words, uint32_t word_bytes, size_t max_held,
                           aggregation::WorkerPool& pool)
    : roster_(std::move(roster)), max_held_(max_held), pool_(&pool), sum_(words, word_bytes) {}

Status MaskedInputs::check_sender(ClientId sender) const {
  if (roster_.count(sender) == 0) {
    return permission_denied(client_name(sender) + " did not complete the share stage");
  }
  if (sent_.count(sender) != 0) {
    return conflict(client_name(sender) + " already sent its masked input");
  }
  return ok_status();
}

Status MaskedInputs::check_refused(ClientId sender, const std::vector<ClientId>& refused) const {
  const std::set<ClientId>& forwarded = roster_.at(sender);
  for (ClientId c : refused) {
    if (forwarded.count(c) == 0) {
      return invalid_argument(client_name(sender) + " refuses the share of " + client_name(c) +
                              ", which it was not forwarded");
    }
  }
  return ok_status();
}

bool MaskedInputs::must_hold(ClientId sender, const std::vector<ClientId>& refused) const {
  return !refused.empty() || refused_by_held_.count(sender) != 0;
}

Status MaskedInputs::check(ClientId sender, const protocol::SecAggMaskedInput& h,
                           size_t body_bytes) const {
  FEDCASE_RETURN_IF_ERROR(check_sender(sender));
  if (h.words != sum_.words() || h.word_bytes != sum_.word_bytes()) {
    return unprocessable("the masked vector must hold " + std::to_string(sum_.words()) +
                         " words of " + std::to_string(sum_.word_bytes()) + " bytes");
  }
  FEDCASE_RETURN_IF_ERROR(protocol::check_masked_vector(h, body_bytes));
  FEDCASE_RETURN_IF_ERROR(check_refused(sender, h.refused_shares));
  if (must_hold(sender, h.refused_shares) && held_.size() >= max_held_) {
    return resource_exhausted(client_name(sender) +
                              "'s input would be held whole (it refused a share, or its share "
                              "was refused), and " +
                              std::to_string(max_held_) + " inputs are held already");
  }
  return ok_status();
}

void MaskedInputs::hold(HeldInput input) {
  refused_by_held_.insert(input.refused.begin(), input.refused.end());
  sent_.insert(input.client);
  held_.push_back(std::move(input));
}

Status MaskedInputs::take(ClientId sender, const protocol::SecAggMaskedInput& h,
                          std::string_view body) {
  FEDCASE_RETURN_IF_ERROR(check(sender, h, body.size()));
  if (must_hold(sender, h.refused_shares)) {
    hold({sender, h.refused_shares, std::string(body)});
    return ok_status();
  }
  FEDCASE_RETURN_IF_ERROR(sum_.add(body, *pool_));
  folded_.push_back(sender);
  sent_.insert(sender);
  return ok_status();
}

Result<std::vector<ClientId>> MaskedInputs::merge(std::string_view bytes) {
  auto partial = decode_masked_partial(bytes, sum_.words(), sum_.word_bytes(), max_held_);
  if (!partial.ok()) return partial.status();
  // The inputs in its sum refused no share and no input before them refused theirs: only a
  // sender that sent another input (which no replica lets through) can stop them, and then
  // the sum changes nothing.
  for (ClientId sender : partial->folded) FEDCASE_RETURN_IF_ERROR(check_sender(sender));
  FEDCASE_RETURN_IF_ERROR(sum_.add(partial->sum, *pool_));
  folded_.insert(folded_.end(), partial->folded.begin(), partial->folded.end());
  sent_.insert(partial->folded.begin(), partial->folded.end());
  std::vector<ClientId> senders = partial->folded;
  // Each held input is taken or refused alone, as if it came here; it is held here too,
  // whatever this coordinator saw: room is needed.
  for (HeldInput& input : partial->held) {
    const ClientId sender = input.client;
    if (!check_sender(sender).ok() || !check_refused(sender, input.refused).ok() ||
        held_.size() >= max_held_) {
      continue;
    }
    hold(std::move(input));
    senders.push_back(sender);
  }
  return senders;
}

std::string MaskedInputs::encode() const {
  nlohmann::json held = nlohmann::json::array();
  for (const HeldInput& h : held_) held.push_back({h.client, h.refused});
  const std::string header = nlohmann::json{{"inputs", folded_}, {"held", held}}.dump();
  std::string out(kLengthBytes, '\0');
  const uint64_t length = header.size();
  for (size_t i = 0; i < kLengthBytes; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  out += header;
  out += sum_.pack();
  for (const HeldInput& h : held_) out += h.body;
  return out;
}

size_t MaskedInputs::memory_bytes() const {
  size_t bytes = sum_.memory_bytes();
  for (const HeldInput& input : held_) bytes += input.body.size();
  return bytes;
}

Result<MaskedInputs::Decided> MaskedInputs::decide() && {
  Decided out{std::move(sum_), {folded_.begin(), folded_.end()}, {}, {}};
  out.left_out = leave_out(out.survivors, held_);
  for (const HeldInput& input : held_) {
    if (out.left_out.count(input.client) != 0) continue;
    FEDCASE_RETURN_IF_ERROR(out.sum.add(input.body, *pool_));
    out.survivors.insert(input.client);
    for (ClientId refused : input.refused) out.refusers[refused].insert(input.client);
  }
  held_.clear();
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
