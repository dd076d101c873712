// Fuzzes build_job (rounds/job_config.h) on the body of POST /v1/admin/jobs, read as the
// admin API reads it: parse_untrusted_json, then the parser and the selection policy and
// server optimizer it builds. Input: the JSON body. An accepted
// config must satisfy the bounds the parser documents.

#include "common/json_read.h"
#include "fuzz/fuzz_target.h"
#include "rounds/job_config.h"

FEDCASE_FUZZ_TARGET(job_config) {
  auto json = fedcase::parse_untrusted_json(fedcase::fuzz::as_text(data, size));
  if (!json.ok()) return 0;
  auto parts = fedcase::rounds::build_job(*json);
  if (!parts.ok()) return 0;
  const fedcase::rounds::JobConfig* config = &parts->config;
  if (config->name.empty() || config->description.size() > 4096 || config->clients_per_round == 0 ||
      config->min_updates == 0 || config->min_updates > config->clients_per_round ||
      config->min_clients == 0) {
    fedcase::fuzz::fuzz_fail("accepted a job config outside its documented bounds");
  }
  if ((config->loss != "cross_entropy" && config->loss != "mse") ||
      (config->evaluation.target == "server" && !config->builtin_model()) ||
      (config->evaluation.target != "server" && config->evaluation.target != "federated")) {
    fedcase::fuzz::fuzz_fail("accepted a bad loss or evaluation target");
  }
  return 0;
}
