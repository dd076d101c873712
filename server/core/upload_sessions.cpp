// The coordinator's upload sessions (coordinator.h, "uploads in chunks"): an update that
// arrives in chunks, kept in the store in pieces until its last one, then submitted as a plain
// upload is (client_api.cpp, submit_update), its values read from a spool file a piece at a
// time when it is a float32 update.

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "aggregation/vector_ops.h"
#include "common/blob.h"
#include "common/crypto.h"
#include "common/mutex.h"
#include "common/json_read.h"
#include "common/spool_file.h"
#include "rounds/upload.h"
#include "server/core/coordinator.h"
#include "server/core/coordinator_state.h"
#include "storage/errors.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

// An upload's grid: the store keeps its pieces as the session's chunks (UploadRecord::
// chunk_bytes is the piece size it was opened with), sent in chunks of upload_chunk_bytes.
rounds::UploadGrid grid_of(const storage::UploadRecord& u, const CoordinatorConfig& config) {
  return rounds::upload_grid(u.bytes, u.chunk_bytes, config.upload_chunk_bytes);
}

Coordinator::UploadProgress progress_of(const storage::UploadRecord& u,
                                        const CoordinatorConfig& config) {
  const rounds::UploadGrid grid = grid_of(u, config);
  return {u.job, u.round, u.id, u.bytes, grid.chunk_bytes, grid.end_of(u.chunks)};
}

// The float32 values of an update held whole in a spool file from byte `values_at` on, read a
// piece at a time.
class SpooledValues : public aggregation::ValueReader {
 public:
  SpooledValues(const SpoolFile& file, uint64_t values_at) : file_(file), values_at_(values_at) {}

  void read(size_t begin, size_t end, float* out) const override {
    Status copied = file_.read(values_at_ + begin * sizeof(float),
                               (end - begin) * sizeof(float), reinterpret_cast<char*>(out));
    if (copied.ok()) return;
    std::fill(out, out + (end - begin), 0.0f);
    MutexLock lock(mu_);
    if (failure_.ok()) failure_ = std::move(copied);
  }

  Status failure() const override {
    MutexLock lock(mu_);
    return failure_;
  }

 private:
  const SpoolFile& file_;
  const uint64_t values_at_;
  mutable Mutex mu_;
  mutable Status failure_ FEDCASE_GUARDED_BY(mu_);
};

// The model version of the float32 update of `layout` that `file` holds whole, whose bytes
// but the last four have the CRC `crc` (rounds::spooled_float_version); nullopt for any other.
std::optional<uint64_t> spooled_float_update(const SpoolFile& file, const ModelLayout& layout,
                                             uint32_t crc) {
  std::string header(std::min<uint64_t>(file.size(), blob_values_offset(layout)), '\0');
  uint32_t sealed = 0;
  if (file.size() < sizeof(sealed) || !file.read(0, header.size(), header.data()).ok() ||
      !file.read(file.size() - sizeof(sealed), sizeof(sealed), reinterpret_cast<char*>(&sealed))
           .ok()) {
    return std::nullopt;
  }
  return rounds::spooled_float_version(layout, header, file.size(), sealed, crc);
}

}  // namespace

Result<Coordinator::UploadProgress> Coordinator::open_upload(ClientId client, JobId job_id,
                                                             RoundIndex round,
                                                             const Result<json>& meta_json,
                                                             const json& body) {
  State& s = *state_;
  auto job = s.find_job(job_id);
  if (!job.ok()) return job.status();
  FEDCASE_RETURN_IF_ERROR(rounds::check_chunked_upload((*job)->config));
  FEDCASE_RETURN_IF_ERROR(upload_wanted(client, job_id, round, ""));
  if (!meta_json.ok()) return meta_json.status();
  auto meta = protocol::read_update_meta(*meta_json);
  if (!meta.ok()) return meta.status();
  auto open = protocol::read_upload_open(body);
  if (!open.ok()) return open.status();
  if (open->bytes > s.config.max_chunked_upload_bytes) {
    return too_large("the update has " + std::to_string(open->bytes) +
                     " bytes; an upload session takes at most " +
                     std::to_string(s.config.max_chunked_upload_bytes));
  }
  auto id = random_token(16);
  if (!id.ok()) return id.status();
  const uint64_t piece_bytes = std::min(s.config.upload_piece_bytes, s.config.upload_chunk_bytes);
  storage::UploadRecord upload{job_id,      round,        *id,       client, open->bytes,
                               piece_bytes, open->sha256, *meta_json};
  auto opened = s.store->open_upload(upload);
  if (!opened.ok()) return opened.status();
  return progress_of(*opened, s.config);
}

Result<Coordinator::UploadProgress> Coordinator::upload_state(ClientId client, JobId job,
                                                              RoundIndex round,
                                                              const std::string& id) {
  State& s = *state_;
  {
    // The pieces a request is storing (a cut chunk's, while its client reconnects) count: the
    // answer waits for them, a moment at most (storing a chunk's pieces takes milliseconds; a
    // Retry-After would cost the client a second a cut).
    constexpr auto kLongestWait = std::chrono::milliseconds(500);
    const auto deadline = std::chrono::steady_clock::now() + kLongestWait;
    MutexLock lock(s.storing_mu);
    while (s.storing.count(id) > 0 && !s.stored.wait_until(s.storing_mu, deadline)) {
    }
  }
  auto upload = s.store->get_upload(job, round, id);
  if (!upload.ok()) return upload.status();
  if (upload->client != client) return storage::upload_not_found(job, round, id);
  return progress_of(*upload, s.config);
}

Result<Coordinator::ChunkAnswer> Coordinator::put_upload_chunk(
    ClientId client, JobId job, RoundIndex round, const std::string& id,
    const Result<protocol::ContentRange>& range, std::string_view bytes,
    double receive_seconds, ChunkBody body) {
  State& s = *state_;
  // Counted while it stores pieces: a question of where the session stands is answered after.
  struct Storing {
    State& s;
    const std::string& id;
    explicit Storing(State& state, const std::string& upload) : s(state), id(upload) {
      MutexLock lock(s.storing_mu);
      ++s.storing[id];
    }
    ~Storing() {
      MutexLock lock(s.storing_mu);
      if (--s.storing[id] == 0) s.storing.erase(id);
      s.stored.notify_all();
    }
  };
  std::optional<Storing> storing(std::in_place, s, id);
  auto upload = s.store->get_upload(job, round, id);
  if (!upload.ok()) return upload.status();
  // Another client's session is answered as one that does not exist.
  if (upload->client != client) return storage::upload_not_found(job, round, id);
  FEDCASE_RETURN_IF_ERROR(upload_wanted(client, job, round, id));
  if (!range.ok()) return range.status();
  if (body == ChunkBody::kWhole && range->length() != bytes.size()) {
    return invalid_argument("Content-Range says the chunk has " +
                            std::to_string(range->length()) + " bytes; its body has " +
                            std::to_string(bytes.size()));
  }
  const rounds::UploadGrid grid = grid_of(*upload, s.config);
  auto place = rounds::place_chunk(grid, upload->chunks, *range, bytes.size());
  if (!place.ok()) return place.status();
  const auto piece = [&](uint64_t index) {
    const uint64_t first = index * grid.piece_bytes;
    return bytes.substr(first - range->first, grid.end_of(index + 1) - first);
  };
  // A piece stored already, by an earlier request or by one storing it at once, holds the
  // same bytes (an upload's bytes never change) or the chunk is refused.
  const auto same_as_stored = [&](uint64_t index) -> Status {
    auto stored = s.store->get_upload_chunk(job, round, id, index);
    if (!stored.ok()) return stored.status();
    if (*stored == piece(index)) return ok_status();
    return conflict("bytes " + std::to_string(index * grid.piece_bytes) + " to " +
                    std::to_string(grid.end_of(index + 1) - 1) + " of upload " + id +
                    " differ from those received before: an upload's bytes never change "
                    "(open a new upload for another update)");
  };
  const uint64_t first_new = place->first_piece + place->resent;
  const uint64_t end = place->first_piece + place->pieces;
  for (uint64_t index = place->first_piece; index < first_new; ++index) {
    FEDCASE_RETURN_IF_ERROR(same_as_stored(index));
  }
  if (first_new == end) return ChunkAnswer{progress_of(*upload, s.config), std::nullopt};
  // A bad value is refused with the chunk that carries it, not once the update is whole.
  auto entry = s.find_job(job);
  if (!entry.ok()) return entry.status();
  const uint64_t new_at = first_new * grid.piece_bytes;
  FEDCASE_RETURN_IF_ERROR(rounds::check_chunk(
      (*entry)->update.layout, (*entry)->config, new_at,
      bytes.substr(new_at - range->first, grid.end_of(end) - new_at)));
  bool stored_last = false;
  for (uint64_t index = first_new; index < end; ++index) {
    const std::string_view part = piece(index);
    const double seconds = receive_seconds * double(part.size()) / double(bytes.size());
    const Status put = s.store->put_upload_chunk(job, round, id, index, part, seconds);
    if (put.code() == Code::kConflict) {
      FEDCASE_RETURN_IF_ERROR(same_as_stored(index));  // another request stored it meanwhile
    } else {
      FEDCASE_RETURN_IF_ERROR(put);
      upload->seconds += seconds;
      stored_last = index + 1 == grid.pieces();
    }
    upload->chunks = index + 1;
  }
  storing.reset();
  if (!stored_last) return ChunkAnswer{progress_of(*upload, s.config), std::nullopt};
  Result<UpdateAccepted> submitted = submit_chunked(client, *upload);
  Status dropped = s.store->drop_upload(job, round, id);
  (void)dropped;  // the round's conclusion drops what is left
  return ChunkAnswer{progress_of(*upload, s.config), std::move(submitted)};
}

Status Coordinator::upload_wanted(ClientId client, JobId job, RoundIndex round,
                                  const std::string& id) {
  auto admission = task_status(client, job, round);
  if (!admission.ok()) return admission.status();
  if (*admission == rounds::Admission::kWanted || *admission == rounds::Admission::kHeld) {
    return ok_status();
  }
  if (!id.empty()) {
    Status dropped = state_->store->drop_upload(job, round, id);
    (void)dropped;  // the round's conclusion drops what is left
  }
  return gone("round " + std::to_string(round) + " of job " + std::to_string(job) +
              " no longer needs this update: " + rounds::admission_reason(*admission));
}

Result<UpdateAccepted> Coordinator::submit_chunked(ClientId client,
                                                   const storage::UploadRecord& upload) {
  State& s = *state_;
  auto job = s.find_job(upload.job);
  if (!job.ok()) return job.status();
  auto spool = SpoolFile::create(s.config.spool_dir);
  if (!spool.ok()) return spool.status();
  Sha256 digest;
  uint32_t crc = 0;  // of every byte but the last four, which seal a blob
  const uint64_t sealed = upload.bytes - std::min<uint64_t>(upload.bytes, sizeof(crc));
  for (uint64_t index = 0; index < upload.chunks; ++index) {
    auto chunk = s.store->get_upload_chunk(upload.job, upload.round, upload.id, index);
    if (!chunk.ok()) return chunk.status();
    digest.add(*chunk);
    const uint64_t at = (*spool)->size();
    crc = crc32_of(std::string_view(*chunk).substr(0, sealed - std::min(sealed, at)), crc);
    FEDCASE_RETURN_IF_ERROR((*spool)->append(*chunk));
  }
  if (digest.hex() != upload.sha256) {
    return unprocessable("the update's bytes do not have the SHA-256 its upload was opened with");
  }
  if (auto version = spooled_float_update(**spool, (*job)->update.layout, crc)) {
    return submit_spooled(client, upload, **spool, *version);
  }
  auto bytes = (*spool)->map();
  if (!bytes.ok()) return bytes.status();
  return submit_blob(client, upload.job, upload.round, upload.meta, *bytes, upload.seconds,
                     s.config.max_chunked_upload_bytes);
}

Result<UpdateAccepted> Coordinator::submit_spooled(ClientId client,
                                                   const storage::UploadRecord& upload,
                                                   const SpoolFile& spool,
                                                   uint64_t model_version) {
  return admit_upload(
      client, upload.job, upload.round, /*masked=*/false, upload.meta, upload.bytes,
      upload.seconds,
      [&](const JobEntry& job, const HeldPlace& held, const protocol::UpdateMeta& meta,
          const std::function<Status()>& admit) {
        const ModelLayout& carried = job.update.layout;
        const SpooledValues reader(spool, blob_values_offset(carried));
        const aggregation::UpdateValues values{nullptr, nullptr, &reader};
        FEDCASE_RETURN_IF_ERROR(rounds::check_upload(carried, held.trained_on, held.round,
                                                     job.config, model_version, values,
                                                     meta.evaluation));
        FEDCASE_RETURN_IF_ERROR(admit());
        return held.aggregate->add(values, carried.element_count(), meta.samples, held.discount);
      });
}

}  // namespace fedcase::server
