#pragma once
// Identifiers shared by every module. Ids are assigned by the store and never reused.

#include <cstdint>

namespace fedcase {

using ClientId = uint64_t;
using JobId = uint64_t;
using TenantId = uint64_t;    // 0: the operator (jobs the admin token creates)
using RoundIndex = uint64_t;  // 1-based within a job; round r produces model version r

}  // namespace fedcase
