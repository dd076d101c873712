#include "rounds/upload.h"

#include <string>

#include "aggregation/validation.h"

namespace fedcase::rounds {

Status check_upload(const ModelLayout& layout, uint64_t trained_on, RoundIndex round,
                    const JobConfig& config, const BlobView& update,
                    const std::optional<protocol::EvalReport>& evaluation) {
  const std::string of_round = ", round " + std::to_string(round);
  const std::string base_version = std::to_string(trained_on);
  if (update.model_version != trained_on) {
    return unprocessable("update was trained on model version " +
                         std::to_string(update.model_version) + of_round + " trains version " +
                         base_version);
  }
  FEDCASE_RETURN_IF_ERROR(
      aggregation::validate_update(layout, update, {config.max_update_norm}));
  if (!evaluation) return ok_status();
  if (evaluation->model_version != trained_on) {
    return unprocessable("the evaluation scores model version " +
                         std::to_string(evaluation->model_version) + of_round +
                         " evaluates version " + base_version);
  }
  const size_t max_samples = config.evaluation.max_samples;
  if (max_samples > 0 && evaluation->samples > max_samples) {
    return unprocessable("the evaluation reports " + std::to_string(evaluation->samples) +
                         " samples, the job asks at most " + std::to_string(max_samples));
  }
  return ok_status();
}

}  // namespace fedcase::rounds
