#pragma once
// secagg_bench's rounds through the real coordinator (the fedcase-coordinator binary, a child
// process on 127.0.0.1 port 0, SQLite in a temporary folder): N client threads of the SDK's
// secure-aggregation stages (client::SecureTask over client::HttpClient) against N plain
// uploads of the same P-parameter update, one job and one round each. Built when the
// coordinator is (not with FEDCASE_PURE_ONLY).

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace fedcase::bench {

// One round of `clients` clients over a model of `params` parameters, secure or plain: the
// coordinator process's CPU seconds from the job's creation to the round's commit (every
// request, fold, stage and unmasking included), the round's wall seconds (open to close), the
// mean CPU seconds of one client thread over its whole round (HTTP, JSON, masking), and the
// round's record. `coordinator` is the binary; exits the process on a failure.
nlohmann::ordered_json coordinator_round(const std::string& coordinator, size_t clients,
                                         size_t params, bool secure);

}  // namespace fedcase::bench
