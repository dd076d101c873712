#include "rounds/upload.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "aggregation/validation.h"

namespace fedcase::rounds {

namespace {

Status check_trained_on(uint64_t model_version, uint64_t trained_on, RoundIndex round) {
  if (model_version == trained_on) return ok_status();
  return unprocessable("update was trained on model version " + std::to_string(model_version) +
                       ", round " + std::to_string(round) + " trains version " +
                       std::to_string(trained_on));
}

}  // namespace

Status check_upload(const ModelLayout& carried, uint64_t trained_on, RoundIndex round,
                    const JobConfig& config, const BlobView& update,
                    const std::optional<protocol::EvalReport>& evaluation) {
  FEDCASE_RETURN_IF_ERROR(check_trained_on(update.model_version, trained_on, round));
  const ValueEncoding compressed = !config.compression ? ValueEncoding::kFloat32
                                  : config.compression->kind == "q8" ? ValueEncoding::kQuantized8
                                                                     : ValueEncoding::kSparse;
  if (update.encoding != ValueEncoding::kFloat32 && update.encoding != compressed) {
    return unprocessable(std::string("the update is compressed (") +
                         (update.encoding == ValueEncoding::kQuantized8 ? "8-bit" : "sparse") +
                         "), which the job does not ask for" +
                         (config.compression ? " (it asks " + config.compression->kind + ")"
                                             : std::string()));
  }
  FEDCASE_RETURN_IF_ERROR(
      aggregation::validate_update(carried, update, {config.max_update_norm}));
  return check_evaluation(trained_on, round, config, evaluation);
}

Status check_upload(const ModelLayout& carried, uint64_t trained_on, RoundIndex round,
                    const JobConfig& config, uint64_t model_version,
                    const aggregation::UpdateValues& values,
                    const std::optional<protocol::EvalReport>& evaluation) {
  FEDCASE_RETURN_IF_ERROR(check_trained_on(model_version, trained_on, round));
  FEDCASE_RETURN_IF_ERROR(aggregation::validate_values(
      values, carried.element_count(), carried.parameter_count(), {config.max_update_norm}));
  return check_evaluation(trained_on, round, config, evaluation);
}

uint64_t samples_allowed(const scheduling::ClientTask& task) {
  return std::max<uint64_t>(task.samples, task.local_steps * task.batch_size);
}

Status check_samples(const protocol::UpdateMeta& meta, uint64_t allowed) {
  if (meta.samples <= allowed) return ok_status();
  return invalid_argument("meta.samples: the update reports " + std::to_string(meta.samples) +
                          " samples, its task allows at most " + std::to_string(allowed));
}

Status check_evaluation(uint64_t trained_on, RoundIndex round, const JobConfig& config,
                        const std::optional<protocol::EvalReport>& evaluation) {
  const std::string of_round = ", round " + std::to_string(round);
  const std::string base_version = std::to_string(trained_on);
  if (!evaluation) return ok_status();
  if (evaluation->model_version != trained_on) {
    return unprocessable("the evaluation scores model version " +
                         std::to_string(evaluation->model_version) + of_round +
                         " evaluates version " + base_version);
  }
  const size_t max_samples = config.evaluation.max_samples;
  if (evaluation->samples > max_samples) {
    return unprocessable("the evaluation reports " + std::to_string(evaluation->samples) +
                         " samples, the job asks at most " + std::to_string(max_samples));
  }
  return ok_status();
}

scheduling::RoundReport completion_report(const protocol::UpdateMeta& meta, uint64_t model_bytes,
                                          uint64_t upload_bytes, double upload_seconds) {
  scheduling::RoundReport report;
  report.samples = meta.samples;
  report.loss_sum = meta.loss_sum;
  report.loss_sq_sum = meta.loss_sq_sum;
  report.compute_s = meta.compute_s;
  report.io_s = meta.io_s;
  report.cache_hits = meta.cache_hits;
  report.cache_misses = meta.cache_misses;
  report.sample_bytes = meta.cache_misses > 0 ? double(meta.bytes_read) / meta.cache_misses : 0;
  report.download_bytes = meta.download_s > 0 ? model_bytes : 0;
  report.download_s = meta.download_s;
  report.upload_bytes = upload_seconds > 0 ? upload_bytes : 0;
  report.upload_s = upload_seconds;
  return report;
}

Status check_chunk(const ModelLayout& carried, const JobConfig& config, uint64_t offset,
                   std::string_view chunk) {
  // Chunks come in order, so the header's format is known from the first one on.
  if (offset == 0 && chunk.size() >= 8) {
    uint32_t format = 0;
    std::memcpy(&format, chunk.data() + 4, sizeof(format));  // little-endian hosts
    if (format != kBlobFormatVersion) {
      return unprocessable("an update sent in chunks is a blob of format " +
                           std::to_string(kBlobFormatVersion) + ", not " +
                           std::to_string(format));
    }
  }
  if (config.compression) return ok_status();
  constexpr uint64_t kValueBytes = sizeof(float);
  const uint64_t values_start = blob_values_offset(carried);
  const uint64_t values_end = values_start + carried.element_count() * kValueBytes;
  const uint64_t chunk_end = offset + chunk.size();
  if (chunk_end <= values_start || offset >= values_end) return ok_status();
  // The values [first, last) lie whole in the chunk.
  const uint64_t first =
      (std::max(offset, values_start) - values_start + kValueBytes - 1) / kValueBytes;
  const uint64_t last = (std::min(chunk_end, values_end) - values_start) / kValueBytes;
  if (first >= last) return ok_status();
  const auto* values = reinterpret_cast<const UnalignedFloat*>(
      chunk.data() + (values_start + first * kValueBytes - offset));
  const size_t bad = first_non_finite(values, last - first);
  if (bad < last - first) {
    return unprocessable("update value " + std::to_string(first + bad) + " is not finite");
  }
  const uint64_t parameters_end = std::min<uint64_t>(last, carried.parameter_count());
  if (config.max_update_norm > 0 && first < parameters_end) {
    const double norm = aggregation::l2_norm(values, parameters_end - first);
    if (norm > config.max_update_norm) {
      return unprocessable("update L2 norm exceeds the bound " +
                           std::to_string(config.max_update_norm) + " in values " +
                           std::to_string(first) + " to " + std::to_string(parameters_end - 1) +
                           " alone (" + std::to_string(norm) + ")");
    }
  }
  return ok_status();
}

std::optional<uint64_t> spooled_float_version(const ModelLayout& layout, std::string_view header,
                                              uint64_t bytes, uint32_t sealed, uint32_t crc) {
  constexpr uint64_t kVersionAt = 8;  // after the magic and the format
  if (header.size() != blob_values_offset(layout) ||
      bytes != header.size() + layout.element_count() * sizeof(float) + sizeof(sealed) ||
      sealed != crc) {
    return std::nullopt;
  }
  uint64_t version = 0;
  std::memcpy(&version, header.data() + kVersionAt, sizeof(version));
  if (header != float_blob_header(layout, version)) return std::nullopt;
  return version;
}

Status check_chunked_upload(const JobConfig& config) {
  if (config.secure_aggregation) {
    return conflict("the job uses secure aggregation: its masked inputs are sent whole");
  }
  if (config.asynchronous()) {
    return conflict("the job is asynchronous: its updates are sent whole");
  }
  return ok_status();
}

UploadGrid upload_grid(uint64_t bytes, uint64_t piece_bytes, uint64_t chunk_bytes) {
  return {bytes, piece_bytes, std::max(piece_bytes, chunk_bytes - chunk_bytes % piece_bytes)};
}

Result<ChunkPlace> place_chunk(const UploadGrid& grid, uint64_t stored,
                               const protocol::ContentRange& range, uint64_t arrived) {
  if (range.total != grid.bytes) {
    return invalid_argument("the chunk says the update has " + std::to_string(range.total) +
                            " bytes; the upload was opened for " + std::to_string(grid.bytes));
  }
  if (range.length() > grid.chunk_bytes) {
    return invalid_argument("a chunk has at most " + std::to_string(grid.chunk_bytes) +
                            " bytes; this one " + std::to_string(range.length()));
  }
  if (arrived > range.length()) {
    return invalid_argument("the chunk's body has " + std::to_string(arrived) +
                            " bytes; its Content-Range says " + std::to_string(range.length()));
  }
  if (range.first % grid.piece_bytes != 0) {
    return invalid_argument("a chunk starts at a multiple of " + std::to_string(grid.piece_bytes) +
                            " bytes; this one at byte " + std::to_string(range.first));
  }
  const bool whole = arrived == range.length();
  const uint64_t end = range.last + 1;
  if (whole && end % grid.piece_bytes != 0 && end != grid.bytes) {
    return invalid_argument("a chunk ends at a multiple of " + std::to_string(grid.piece_bytes) +
                            " bytes or at the update's end; this one at byte " +
                            std::to_string(range.last));
  }
  ChunkPlace place;
  place.first_piece = range.first / grid.piece_bytes;
  if (place.first_piece > stored) {
    const std::string received = std::to_string(grid.end_of(stored));
    return conflict("the upload holds its first " + received +
                    " bytes: send the chunk at byte " + received + " next");
  }
  const uint64_t kept_end = whole ? end : range.first + arrived;
  place.last = kept_end == grid.bytes;
  place.pieces = (place.last ? grid.pieces() : kept_end / grid.piece_bytes) - place.first_piece;
  place.resent = std::min(place.pieces, stored - place.first_piece);
  return place;
}

}  // namespace fedcase::rounds
