#include "protocol/secagg.h"

#include <algorithm>
#include <limits>
#include <set>

#include "protocol/base64.h"
#include "protocol/internal.h"

namespace fedcase::protocol {
namespace {

// Reads the required base64 member `key` into `out`: `min` to `max` bytes once decoded.
void read_bytes(ObjectReader& r, const char* key, std::string& out, size_t min, size_t max) {
  std::string text;
  r.require(key).text(key, text);
  if (!r.status().ok()) return;
  // Base64 is 4 characters for 3 bytes: anything longer cannot decode to `max` bytes.
  std::optional<std::string> bytes;
  if (text.size() <= (max + 2) / 3 * 4) bytes = decode_base64(text);
  const std::string rule = min == max ? "must be base64 of " + std::to_string(max) + " bytes"
                                      : "must be base64 of " + std::to_string(min) + " to " +
                                            std::to_string(max) + " bytes";
  internal::check(r, bytes && bytes->size() >= min && bytes->size() <= max, key, rule);
  if (bytes && bytes->size() >= min && bytes->size() <= max) out = std::move(*bytes);
}

void read_key(ObjectReader& r, const char* key, std::string& out) {
  read_bytes(r, key, out, kSecAggKeyBytes, kSecAggKeyBytes);
}

void read_signature(ObjectReader& r, const char* key, std::string& out) {
  read_bytes(r, key, out, kSecAggSignatureBytes, kSecAggSignatureBytes);
}

void read_blob(ObjectReader& r, const char* key, std::string& out) {
  read_bytes(r, key, out, 1, kMaxSecAggBlobBytes);
}

// The required array member `key`, or null (with an error recorded) when it is not an array of
// at most kMaxSecAggClients elements.
const nlohmann::json* read_array(ObjectReader& r, const char* key) {
  r.require(key);
  const nlohmann::json* array = r.member(key);
  if (array == nullptr || !r.status().ok()) return nullptr;
  if (!array->is_array() || array->size() > kMaxSecAggClients) {
    internal::check(
        r, false, key,
        "must be an array of at most " + std::to_string(kMaxSecAggClients) + " elements");
    return nullptr;
  }
  return array;
}

// A required list of distinct client ids; `increasing`: also in increasing order.
void read_ids(ObjectReader& r, const char* key, std::vector<ClientId>& out,
              bool increasing = false) {
  const nlohmann::json* array = read_array(r, key);
  if (array == nullptr) return;
  std::vector<ClientId> ids;
  ids.reserve(array->size());
  for (const nlohmann::json& id : *array) {
    if (!id.is_number_unsigned()) {
      return internal::check(r, false, key, "must hold client ids (integers >= 0)");
    }
    ids.push_back(id.get<ClientId>());
  }
  if (increasing) {
    const bool ok = std::adjacent_find(ids.begin(), ids.end(), std::greater_equal<>()) == ids.end();
    if (!ok) return internal::check(r, false, key, "must be strictly increasing");
  } else if (std::set<ClientId>(ids.begin(), ids.end()).size() != ids.size()) {
    return internal::check(r, false, key, "must not repeat a client");
  }
  out = std::move(ids);
}

// A required list of nested messages, each naming a distinct client.
template <class T>
void read_list(ObjectReader& r, const char* key, std::vector<T>& out) {
  const nlohmann::json* array = read_array(r, key);
  if (array == nullptr) return;
  std::vector<T> items(array->size());
  std::set<ClientId> clients;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string where = r.path(key) + "[" + std::to_string(i) + "]";
    Status s = internal::read((*array)[i], where, items[i], nullptr);
    if (!s.ok()) return void(r.merge(s));
    if (!clients.insert(items[i].client).second) {
      return internal::check(r, false, key, "must not repeat a client");
    }
  }
  out = std::move(items);
}

template <class T, class Write>
nlohmann::json write_list(const std::vector<T>& items, Write write) {
  nlohmann::json out = nlohmann::json::array();
  for (const T& item : items) out.push_back(write(item));
  return out;
}

// The job, round and (when `client` is not null) sender every message names.
void read_binding(ObjectReader& r, JobId& job, RoundIndex& round, ClientId* client) {
  r.require("job_id")
      .integer("job_id", job)
      .require("round")
      .integer("round", round, 1, std::numeric_limits<RoundIndex>::max());
  if (client != nullptr) r.require("client_id").integer("client_id", *client);
}

}  // namespace

namespace internal {

Status read(const nlohmann::json& value, const std::string& where, SecAggParams& out, Keys* keys) {
  ObjectReader r(value, where);
  r.require("degree")
      .integer("degree", out.degree, 1, kMaxSecAggClients - 1)
      .require("threshold")
      .integer("threshold", out.threshold, 1, kMaxSecAggClients - 1)
      .require("bits")
      .integer("bits", out.bits, 1, 64)
      .require("clip")
      .finite("clip", out.clip, 0)
      .require("scale")
      .finite("scale", out.scale, 0)
      .require("max_weight")
      .integer("max_weight", out.max_weight, 1, std::numeric_limits<uint64_t>::max())
      .require("vector_length")
      .integer("vector_length", out.vector_length, 1, kMaxSecAggVectorLength);
  if (r.status().ok()) {
    check(r, out.threshold <= out.degree, "threshold", "must be at most degree");
    check(r, out.clip > 0, "clip", "must be > 0");
    check(r, out.scale > 0, "scale", "must be > 0");
  }
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, SecAggAdvertiseKeys& out,
            Keys* keys) {
  ObjectReader r(value, where);
  read_binding(r, out.job, out.round, &out.client);
  read_key(r, "cipher_public_key", out.cipher_public_key);
  read_key(r, "mask_public_key", out.mask_public_key);
  read_signature(r, "signature", out.signature);
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, SecAggPeerKeys& out,
            Keys* keys) {
  ObjectReader r(value, where);
  r.require("client_id").integer("client_id", out.client);
  read_key(r, "cipher_public_key", out.cipher_public_key);
  read_key(r, "mask_public_key", out.mask_public_key);
  read_key(r, "signing_public_key", out.signing_public_key);
  read_signature(r, "signature", out.signature);
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, SecAggGraph& out, Keys* keys) {
  ObjectReader r(value, where);
  read_binding(r, out.job, out.round, nullptr);
  r.require("params");
  read_nested(r, "params", out.params);
  read_key(r, "graph_seed", out.graph_seed);
  read_ids(r, "participants", out.participants, true);
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, SecAggKeyList& out, Keys* keys) {
  ObjectReader r(value, where);
  read_binding(r, out.job, out.round, nullptr);
  read_list(r, "neighbours", out.neighbours);
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, SecAggKeys& out, Keys* keys) {
  ObjectReader r(value, where);
  r.require("graph");
  read_nested(r, "graph", out.graph);
  r.require("key_list");
  read_nested(r, "key_list", out.key_list);
  if (r.status().ok()) {
    const bool same = out.graph.job == out.key_list.job && out.graph.round == out.key_list.round;
    check(r, same, "key_list", "must name the graph's job and round");
  }
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, SecAggCiphertext& out,
            Keys* keys) {
  ObjectReader r(value, where);
  r.require("client_id").integer("client_id", out.client);
  read_blob(r, "ciphertext", out.ciphertext);
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, SecAggShares& out, Keys* keys) {
  ObjectReader r(value, where);
  read_binding(r, out.job, out.round, &out.client);
  read_key(r, "seed_commitment", out.seed_commitment);
  read_list(r, "shares", out.shares);
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, SecAggForwardedShares& out,
            Keys* keys) {
  ObjectReader r(value, where);
  read_binding(r, out.job, out.round, nullptr);
  read_list(r, "shares", out.shares);
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, SecAggMaskedInput& out,
            Keys* keys) {
  ObjectReader r(value, where);
  read_binding(r, out.job, out.round, &out.client);
  r.require("words")
      .integer("words", out.words, 2, kMaxSecAggVectorLength + 1)
      .require("word_bytes")
      .integer("word_bytes", out.word_bytes, 1, 8);
  read_ids(r, "refused_shares", out.refused_shares);
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, SecAggUnmaskRequest& out,
            Keys* keys) {
  ObjectReader r(value, where);
  read_binding(r, out.job, out.round, nullptr);
  read_ids(r, "survivors", out.survivors);
  read_ids(r, "dropped", out.dropped);
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, SecAggShare& out, Keys* keys) {
  ObjectReader r(value, where);
  r.require("client_id").integer("client_id", out.client);
  read_blob(r, "share", out.share);
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, SecAggUnmaskResponse& out,
            Keys* keys) {
  ObjectReader r(value, where);
  read_binding(r, out.job, out.round, &out.client);
  read_list(r, "seed_shares", out.seed_shares);
  read_list(r, "key_shares", out.key_shares);
  return finish(r, keys);
}

}  // namespace internal

Result<SecAggParams> read_secagg_params(const nlohmann::json& params, const std::string& where) {
  return internal::read_message<SecAggParams>(params, where);
}

nlohmann::json write_secagg_params(const SecAggParams& p) {
  return {{"degree", p.degree},
          {"threshold", p.threshold},
          {"bits", p.bits},
          {"clip", p.clip},
          {"scale", p.scale},
          {"max_weight", p.max_weight},
          {"vector_length", p.vector_length}};
}

Result<SecAggAdvertiseKeys> read_secagg_advertise_keys(const nlohmann::json& message) {
  return internal::read_message<SecAggAdvertiseKeys>(message, "secagg_advertise_keys");
}

nlohmann::json write_secagg_advertise_keys(const SecAggAdvertiseKeys& m) {
  return {{"job_id", m.job},
          {"round", m.round},
          {"client_id", m.client},
          {"cipher_public_key", encode_base64(m.cipher_public_key)},
          {"mask_public_key", encode_base64(m.mask_public_key)},
          {"signature", encode_base64(m.signature)}};
}

Result<SecAggPeerKeys> read_secagg_peer_keys(const nlohmann::json& message,
                                             const std::string& where) {
  return internal::read_message<SecAggPeerKeys>(message, where);
}

nlohmann::json write_secagg_peer_keys(const SecAggPeerKeys& m) {
  return {{"client_id", m.client},
          {"cipher_public_key", encode_base64(m.cipher_public_key)},
          {"mask_public_key", encode_base64(m.mask_public_key)},
          {"signing_public_key", encode_base64(m.signing_public_key)},
          {"signature", encode_base64(m.signature)}};
}

Result<SecAggGraph> read_secagg_graph(const nlohmann::json& message) {
  return internal::read_message<SecAggGraph>(message, "secagg_graph");
}

nlohmann::json write_secagg_graph(const SecAggGraph& m) {
  return {{"job_id", m.job},
          {"round", m.round},
          {"params", write_secagg_params(m.params)},
          {"graph_seed", encode_base64(m.graph_seed)},
          {"participants", m.participants}};
}

Result<SecAggKeyList> read_secagg_key_list(const nlohmann::json& message) {
  return internal::read_message<SecAggKeyList>(message, "secagg_key_list");
}

nlohmann::json write_secagg_key_list(const SecAggKeyList& m) {
  return {{"job_id", m.job},
          {"round", m.round},
          {"neighbours", write_list(m.neighbours, write_secagg_peer_keys)}};
}

Result<SecAggKeys> read_secagg_keys(const nlohmann::json& message) {
  return internal::read_message<SecAggKeys>(message, "secagg_keys");
}

nlohmann::json write_secagg_keys(const SecAggKeys& m) {
  return {{"graph", write_secagg_graph(m.graph)}, {"key_list", write_secagg_key_list(m.key_list)}};
}

std::string splice_secagg_keys(const std::string& graph_json, const std::string& key_list_json) {
  // nlohmann's objects sort their keys: "graph" comes before "key_list".
  return "{\"graph\":" + graph_json + ",\"key_list\":" + key_list_json + "}";
}

Result<SecAggCiphertext> read_secagg_ciphertext(const nlohmann::json& message,
                                                const std::string& where) {
  return internal::read_message<SecAggCiphertext>(message, where);
}

nlohmann::json write_secagg_ciphertext(const SecAggCiphertext& m) {
  return {{"client_id", m.client}, {"ciphertext", encode_base64(m.ciphertext)}};
}

Result<SecAggShares> read_secagg_shares(const nlohmann::json& message) {
  return internal::read_message<SecAggShares>(message, "secagg_shares");
}

nlohmann::json write_secagg_shares(const SecAggShares& m) {
  return {{"job_id", m.job},
          {"round", m.round},
          {"client_id", m.client},
          {"seed_commitment", encode_base64(m.seed_commitment)},
          {"shares", write_list(m.shares, write_secagg_ciphertext)}};
}

Result<SecAggForwardedShares> read_secagg_forwarded_shares(const nlohmann::json& message) {
  return internal::read_message<SecAggForwardedShares>(message, "secagg_forwarded_shares");
}

nlohmann::json write_secagg_forwarded_shares(const SecAggForwardedShares& m) {
  return {{"job_id", m.job},
          {"round", m.round},
          {"shares", write_list(m.shares, write_secagg_ciphertext)}};
}

Result<SecAggMaskedInput> read_secagg_masked_input(const nlohmann::json& message) {
  return internal::read_message<SecAggMaskedInput>(message, "secagg_masked_input");
}

nlohmann::json write_secagg_masked_input(const SecAggMaskedInput& m) {
  return {{"job_id", m.job},  {"round", m.round},           {"client_id", m.client},
          {"words", m.words}, {"word_bytes", m.word_bytes}, {"refused_shares", m.refused_shares}};
}

Result<SecAggUnmaskRequest> read_secagg_unmask_request(const nlohmann::json& message) {
  return internal::read_message<SecAggUnmaskRequest>(message, "secagg_unmask_request");
}

nlohmann::json write_secagg_unmask_request(const SecAggUnmaskRequest& m) {
  return {
      {"job_id", m.job}, {"round", m.round}, {"survivors", m.survivors}, {"dropped", m.dropped}};
}

Result<SecAggShare> read_secagg_share(const nlohmann::json& message, const std::string& where) {
  return internal::read_message<SecAggShare>(message, where);
}

nlohmann::json write_secagg_share(const SecAggShare& m) {
  return {{"client_id", m.client}, {"share", encode_base64(m.share)}};
}

Result<SecAggUnmaskResponse> read_secagg_unmask_response(const nlohmann::json& message) {
  return internal::read_message<SecAggUnmaskResponse>(message, "secagg_unmask_response");
}

nlohmann::json write_secagg_unmask_response(const SecAggUnmaskResponse& m) {
  return {{"job_id", m.job},
          {"round", m.round},
          {"client_id", m.client},
          {"seed_shares", write_list(m.seed_shares, write_secagg_share)},
          {"key_shares", write_list(m.key_shares, write_secagg_share)}};
}

Status check_masked_vector(const SecAggMaskedInput& header, size_t body_bytes) {
  if (header.word_bytes < 1 || header.word_bytes > 8) {
    return invalid_argument("secagg_masked_input.word_bytes must be in [1, 8]");
  }
  if (header.words > std::numeric_limits<size_t>::max() / header.word_bytes ||
      header.words * header.word_bytes != body_bytes) {
    return unprocessable("the masked vector holds " + std::to_string(body_bytes) +
                         " bytes; its header announces " + std::to_string(header.words) +
                         " words of " + std::to_string(header.word_bytes) + " bytes");
  }
  return ok_status();
}

}  // namespace fedcase::protocol
