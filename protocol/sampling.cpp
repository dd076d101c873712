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

const char* repetition_name(Repetition repetition) {
  switch (repetition) {
    case Repetition::kFixed:
      return "fixed";
    case Repetition::kAdaptive:
      return "adaptive";
  }
  return "fixed";
}

Result<Repetition> parse_repetition(std::string_view name) {
  for (Repetition r : {Repetition::kFixed, Repetition::kAdaptive}) {
    if (name == repetition_name(r)) return r;
  }
  return invalid_argument("unknown repetition '" + std::string(name) +
                          "' (expected \"fixed\" or \"adaptive\")");
}

}  // namespace fedcase::protocol
