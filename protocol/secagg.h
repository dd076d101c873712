#pragma once
// The messages of secure aggregation (SecAgg+, docs/secure_aggregation.md), one reader and one
// writer each, shared by the coordinator and the SDK (docs/protocol.md, "Secure aggregation"):
//
//   stage           client -> coordinator               coordinator -> client
//   advertise keys  SecAggAdvertiseKeys                 SecAggGraph (one for all: params,
//                                                       graph), SecAggKeyList (neighbours' keys)
//   share keys      SecAggShares (encrypted shares)     SecAggForwardedShares
//   masked input    SecAggMaskedInput + binary body     SecAggUnmaskRequest
//   unmask          SecAggUnmaskResponse
//
// Every message names its job, round and (client to coordinator) its sender, so that a message
// of another round or sender is refused; binary members (keys, ciphertexts, shares) are raw
// bytes here and canonical base64 in JSON. The masked vector itself travels as a binary body
// of little-endian words (check_masked_vector).
//
// Pure functions over plain values; thread-safe. Untrusted input gives a Status, never an
// exception.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/status.h"

namespace fedcase::protocol {

inline constexpr size_t kSecAggKeyBytes = 32;  // X25519 and Ed25519 public keys, the graph seed
inline constexpr size_t kSecAggSignatureBytes = 64;  // Ed25519 signatures
inline constexpr size_t kMaxSecAggBlobBytes = 1024;  // a ciphertext or a share
inline constexpr size_t kMaxSecAggClients = 100000;  // participants of a round, any id list
inline constexpr uint64_t kMaxSecAggVectorLength = uint64_t(1) << 32;  // masked parameters

// The round's parameters (docs/secure_aggregation.md, "Parameters"): the key list's `params`.
// Every member is required.
struct SecAggParams {
  uint32_t degree = 0;         // neighbours of each client, in [1, kMaxSecAggClients)
  uint32_t threshold = 0;      // shares that reconstruct a secret, in [1, degree]
  uint32_t bits = 32;          // arithmetic mod 2^bits, in [1, 64]
  double clip = 1;             // L2 bound of a client's delta, finite, > 0
  double scale = 1;            // quantisation steps per unit, finite, > 0
  uint64_t max_weight = 1;     // a client's FedAvg weight is clipped to [0, max_weight], >= 1
  uint64_t vector_length = 1;  // parameters of the model, in [1, kMaxSecAggVectorLength]

  bool operator==(const SecAggParams& o) const {
    return degree == o.degree && threshold == o.threshold && bits == o.bits && clip == o.clip &&
           scale == o.scale && max_weight == o.max_weight && vector_length == o.vector_length;
  }
  bool operator!=(const SecAggParams& o) const { return !(*this == o); }
};

// Stage 1, client to coordinator: the client's two fresh X25519 public keys of the round,
// signed with its long-term Ed25519 key (secagg::advertised_keys_message).
struct SecAggAdvertiseKeys {
  JobId job = 0;
  RoundIndex round = 1;           // >= 1
  ClientId client = 0;            // the sender
  std::string cipher_public_key;  // kSecAggKeyBytes: agrees the keys that encrypt shares
  std::string mask_public_key;    // kSecAggKeyBytes: agrees the pairwise masks
  std::string signature;          // kSecAggSignatureBytes

  bool operator==(const SecAggAdvertiseKeys& o) const {
    return job == o.job && round == o.round && client == o.client &&
           cipher_public_key == o.cipher_public_key && mask_public_key == o.mask_public_key &&
           signature == o.signature;
  }
  bool operator!=(const SecAggAdvertiseKeys& o) const { return !(*this == o); }
};

// One neighbour's public keys in a key list, with its registered signing key and its signature
// over them, which the recipient checks before it encrypts anything to them.
struct SecAggPeerKeys {
  ClientId client = 0;
  std::string cipher_public_key;   // kSecAggKeyBytes
  std::string mask_public_key;     // kSecAggKeyBytes
  std::string signing_public_key;  // kSecAggKeyBytes: Ed25519, registered at enrollment
  std::string signature;           // kSecAggSignatureBytes

  bool operator==(const SecAggPeerKeys& o) const {
    return client == o.client && cipher_public_key == o.cipher_public_key &&
           mask_public_key == o.mask_public_key && signing_public_key == o.signing_public_key &&
           signature == o.signature;
  }
  bool operator!=(const SecAggPeerKeys& o) const { return !(*this == o); }
};

// Stage 1, coordinator to every participant (the same message for all, so it is written once
// a round): the parameters and the graph, its seed and the participants it is drawn over, so
// a client can redraw it and check the neighbours its key list names.
struct SecAggGraph {
  JobId job = 0;
  RoundIndex round = 1;
  SecAggParams params;
  std::string graph_seed;              // kSecAggKeyBytes
  std::vector<ClientId> participants;  // strictly increasing, at most kMaxSecAggClients

  bool operator==(const SecAggGraph& o) const {
    return job == o.job && round == o.round && params == o.params && graph_seed == o.graph_seed &&
           participants == o.participants;
  }
  bool operator!=(const SecAggGraph& o) const { return !(*this == o); }
};

// Stage 1, coordinator to one client: its neighbours' public keys.
struct SecAggKeyList {
  JobId job = 0;
  RoundIndex round = 1;
  std::vector<SecAggPeerKeys> neighbours;  // at most kMaxSecAggClients, distinct clients

  bool operator==(const SecAggKeyList& o) const {
    return job == o.job && round == o.round && neighbours == o.neighbours;
  }
  bool operator!=(const SecAggKeyList& o) const { return !(*this == o); }
};

// Stage 1, coordinator to one client, in one answer: the graph (the same for every
// participant) and the client's key list.
struct SecAggKeys {
  SecAggGraph graph;
  SecAggKeyList key_list;

  bool operator==(const SecAggKeys& o) const { return graph == o.graph && key_list == o.key_list; }
  bool operator!=(const SecAggKeys& o) const { return !(*this == o); }
};

// An encrypted share between two clients: `client` is the recipient in SecAggShares and the
// sender in SecAggForwardedShares.
struct SecAggCiphertext {
  ClientId client = 0;
  std::string ciphertext;  // 1 to kMaxSecAggBlobBytes

  bool operator==(const SecAggCiphertext& o) const {
    return client == o.client && ciphertext == o.ciphertext;
  }
  bool operator!=(const SecAggCiphertext& o) const { return !(*this == o); }
};

// Stage 2, client to coordinator: one ciphertext per neighbour, and the commitment to the
// client's self-mask seed (its SHA-256, bound to the round), which the coordinator checks the
// reconstructed seed against.
struct SecAggShares {
  JobId job = 0;
  RoundIndex round = 1;
  ClientId client = 0;
  std::string seed_commitment;           // kSecAggKeyBytes
  std::vector<SecAggCiphertext> shares;  // at most kMaxSecAggClients, distinct recipients

  bool operator==(const SecAggShares& o) const {
    return job == o.job && round == o.round && client == o.client &&
           seed_commitment == o.seed_commitment && shares == o.shares;
  }
  bool operator!=(const SecAggShares& o) const { return !(*this == o); }
};

// Stage 2, coordinator to client: the ciphertexts addressed to the client, one per neighbour
// that completed the share stage; the client masks its input with exactly these neighbours.
struct SecAggForwardedShares {
  JobId job = 0;
  RoundIndex round = 1;
  std::vector<SecAggCiphertext> shares;  // at most kMaxSecAggClients, distinct senders

  bool operator==(const SecAggForwardedShares& o) const {
    return job == o.job && round == o.round && shares == o.shares;
  }
  bool operator!=(const SecAggForwardedShares& o) const { return !(*this == o); }
};

// Stage 3, client to coordinator: the header of the masked vector (the JSON of the
// X-Fedcase-SecAgg header), whose body is `words` little-endian words of `word_bytes` bytes.
struct SecAggMaskedInput {
  JobId job = 0;
  RoundIndex round = 1;
  ClientId client = 0;
  uint64_t words = 1;       // params.vector_length + 1 (the weight), in [2, 2^32 + 1]
  uint32_t word_bytes = 4;  // the fewest bytes that hold params.bits, in [1, 8]
  // Neighbours whose forwarded share the client could not decrypt: it holds no share of their
  // secrets (at most kMaxSecAggClients).
  std::vector<ClientId> refused_shares;

  bool operator==(const SecAggMaskedInput& o) const {
    return job == o.job && round == o.round && client == o.client && words == o.words &&
           word_bytes == o.word_bytes && refused_shares == o.refused_shares;
  }
  bool operator!=(const SecAggMaskedInput& o) const { return !(*this == o); }
};

// Stage 4, coordinator to client: which of its neighbours sent their masked input (reveal the
// share of their self-mask seed) and which dropped after sharing (reveal the share of their
// mask key). A client never appears in both, and a client refuses a request that asks for
// both shares of one neighbour, now or across requests.
struct SecAggUnmaskRequest {
  JobId job = 0;
  RoundIndex round = 1;
  std::vector<ClientId> survivors;  // at most kMaxSecAggClients each
  std::vector<ClientId> dropped;

  bool operator==(const SecAggUnmaskRequest& o) const {
    return job == o.job && round == o.round && survivors == o.survivors && dropped == o.dropped;
  }
  bool operator!=(const SecAggUnmaskRequest& o) const { return !(*this == o); }
};

// One revealed Shamir share of `client`'s secret.
struct SecAggShare {
  ClientId client = 0;
  std::string share;  // 1 to kMaxSecAggBlobBytes

  bool operator==(const SecAggShare& o) const { return client == o.client && share == o.share; }
  bool operator!=(const SecAggShare& o) const { return !(*this == o); }
};

// Stage 4, client to coordinator.
struct SecAggUnmaskResponse {
  JobId job = 0;
  RoundIndex round = 1;
  ClientId client = 0;
  std::vector<SecAggShare> seed_shares;  // of survivors' self-mask seeds
  std::vector<SecAggShare> key_shares;   // of dropped clients' mask keys

  bool operator==(const SecAggUnmaskResponse& o) const {
    return job == o.job && round == o.round && client == o.client && seed_shares == o.seed_shares &&
           key_shares == o.key_shares;
  }
  bool operator!=(const SecAggUnmaskResponse& o) const { return !(*this == o); }
};

// Each reader: every member is required (lists may be empty unless said otherwise);
// kInvalidArgument naming the field for a missing, mistyped or out-of-range one, base64 that
// is not canonical or decodes to the wrong length, a list over its bound, a repeated client in
// a list. Unknown keys are ignored.
Result<SecAggParams> read_secagg_params(const nlohmann::json& params,
                                        const std::string& where = "params");
nlohmann::json write_secagg_params(const SecAggParams& params);
Result<SecAggAdvertiseKeys> read_secagg_advertise_keys(const nlohmann::json& message);
nlohmann::json write_secagg_advertise_keys(const SecAggAdvertiseKeys& message);
Result<SecAggPeerKeys> read_secagg_peer_keys(const nlohmann::json& message,
                                             const std::string& where = "peer");
nlohmann::json write_secagg_peer_keys(const SecAggPeerKeys& message);
Result<SecAggGraph> read_secagg_graph(const nlohmann::json& message);
nlohmann::json write_secagg_graph(const SecAggGraph& message);
Result<SecAggKeyList> read_secagg_key_list(const nlohmann::json& message);
nlohmann::json write_secagg_key_list(const SecAggKeyList& message);
Result<SecAggKeys> read_secagg_keys(const nlohmann::json& message);
nlohmann::json write_secagg_keys(const SecAggKeys& message);
// The same text as write_secagg_keys(...).dump() from the two messages already written (the
// graph is written once a round and spliced into every participant's answer).
std::string splice_secagg_keys(const std::string& graph_json, const std::string& key_list_json);
Result<SecAggCiphertext> read_secagg_ciphertext(const nlohmann::json& message,
                                                const std::string& where = "ciphertext");
nlohmann::json write_secagg_ciphertext(const SecAggCiphertext& message);
Result<SecAggShares> read_secagg_shares(const nlohmann::json& message);
nlohmann::json write_secagg_shares(const SecAggShares& message);
Result<SecAggForwardedShares> read_secagg_forwarded_shares(const nlohmann::json& message);
nlohmann::json write_secagg_forwarded_shares(const SecAggForwardedShares& message);
Result<SecAggMaskedInput> read_secagg_masked_input(const nlohmann::json& message);
nlohmann::json write_secagg_masked_input(const SecAggMaskedInput& message);
Result<SecAggUnmaskRequest> read_secagg_unmask_request(const nlohmann::json& message);
nlohmann::json write_secagg_unmask_request(const SecAggUnmaskRequest& message);
Result<SecAggShare> read_secagg_share(const nlohmann::json& message,
                                      const std::string& where = "share");
nlohmann::json write_secagg_share(const SecAggShare& message);
Result<SecAggUnmaskResponse> read_secagg_unmask_response(const nlohmann::json& message);
nlohmann::json write_secagg_unmask_response(const SecAggUnmaskResponse& message);

// Whether a masked vector's body of `body_bytes` bytes is what `header` announces:
// kInvalidArgument for a word size other than 4 or 8, kUnprocessable for a body whose length
// is not words x word_bytes.
Status check_masked_vector(const SecAggMaskedInput& header, size_t body_bytes);

}  // namespace fedcase::protocol
