#pragma once
// Base64 (RFC 4648 section 4: the standard alphabet, with padding) for the binary members of
// JSON messages: the secure-aggregation keys, ciphertexts and shares (protocol/secagg.h).
//
// Pure functions; thread-safe. Decoding untrusted text gives nullopt, never an exception.

#include <optional>
#include <string>
#include <string_view>

namespace fedcase::protocol {

std::string encode_base64(std::string_view bytes);

// The bytes `text` encodes, or nullopt unless it is canonical base64: a multiple of 4
// characters of the alphabet, '=' only as the final padding, and zero bits where padding
// leaves a character's low bits unused (so each byte string has exactly one encoding).
std::optional<std::string> decode_base64(std::string_view text);

}  // namespace fedcase::protocol
