#include "protocol/sampling.h"

#include <string>

namespace fedcase::protocol {

const char* sampling_name(Sampling sampling) {
  switch (sampling) {
    case Sampling::kUniform:
      return "uniform";
    case Sampling::kImportance:
      return "importance";
  }
  return "uniform";
}

Result<Sampling> parse_sampling(std::string_view name) {
  for (Sampling s : {Sampling::kUniform, Sampling::kImportance}) {
    if (name == sampling_name(s)) return s;
  }
  return invalid_argument("unknown sampling '" + std::string(name) +
                          "' (expected \"uniform\" or \"importance\")");
}

const char* cache_policy_name(CachePolicy policy) {
  switch (policy) {
    case CachePolicy::kNone:
      return "none";
    case CachePolicy::kLru:
      return "lru";
    case CachePolicy::kImportance:
      return "importance";
  }
  return "none";
}

Result<CachePolicy> parse_cache_policy(std::string_view name) {
  for (CachePolicy p : {CachePolicy::kNone, CachePolicy::kLru, CachePolicy::kImportance}) {
    if (name == cache_policy_name(p)) return p;
  }
  return invalid_argument("unknown cache policy '" + std::string(name) +
                          "' (expected \"importance\", \"lru\" or \"none\")");
}

}  // namespace fedcase::protocol
