#pragma once
// The checks an uploaded update passes before it joins a round, beyond its metadata's own
// syntax: those that need the round's base model and the job's config. They read the update
// where it lies (a BlobView into the request body), without copying it.
//
// Pure functions; thread-safe.

#include <algorithm>
#include <optional>

#include "aggregation/vector_ops.h"
#include "common/blob.h"
#include "common/ids.h"
#include "common/status.h"
#include "protocol/update_meta.h"
#include "protocol/upload_session.h"
#include "rounds/evaluation.h"
#include "rounds/job_config.h"
#include "rounds/job_runtime.h"
#include "scheduling/round_plan.h"

namespace fedcase::rounds {

// Whether `update` (the delta local - global) and its client's `evaluation` may join round
// `round`, whose client's task trains and evaluates model version `trained_on`; an update
// carries `carried`, the tensors the job trains (UpdateLayout::layout of the job's model).
// kUnprocessable naming what is wrong: the update was trained on another model version, is
// compressed other than the job asks (float32 is always taken), does not match `carried`,
// holds a non-finite value or exceeds config.max_update_norm
// (aggregation::validate_update); the evaluation scores another model version, or more
// held-out samples than config.evaluation.max_samples (no honest report, and it would
// outweigh the others in the round's means).
Status check_upload(const ModelLayout& carried, uint64_t trained_on, RoundIndex round,
                    const JobConfig& config, const BlobView& update,
                    const std::optional<protocol::EvalReport>& evaluation);
// The same checks for a float32 update whose header was found to be that of `carried` at
// `model_version` (float_blob_header) and whose values are read a piece at a time (`values`:
// an upload session's update in its spool file), in one pass; also the reader's error.
Status check_upload(const ModelLayout& carried, uint64_t trained_on, RoundIndex round,
                    const JobConfig& config, uint64_t model_version,
                    const aggregation::UpdateValues& values,
                    const std::optional<protocol::EvalReport>& evaluation);

// The most samples an update of `task` may report: its local steps of whole batches (the
// sample budget, or local_epochs times the client's declared dataset size, rounded up to
// whole batches), never less than the budget. An update's samples are its weight in FedAvg's
// mean: a bound keeps one client from outweighing the round.
uint64_t samples_allowed(const scheduling::ClientTask& task);
// kInvalidArgument when `meta` reports more samples than `allowed`, naming both.
Status check_samples(const protocol::UpdateMeta& meta, uint64_t allowed);

// The evaluation's part of check_upload, for an update the coordinator cannot see (a masked
// input of secure aggregation): its model version and sample count.
Status check_evaluation(uint64_t trained_on, RoundIndex round, const JobConfig& config,
                        const std::optional<protocol::EvalReport>& evaluation);

// What the client's profile learns from an accepted update's statistics (`meta`) and transfer
// times: the model's bytes if it reported a download time, the upload's bytes if its upload
// time was measured (`upload_seconds` > 0; 0 for an update another replica received).
scheduling::RoundReport completion_report(const protocol::UpdateMeta& meta, uint64_t model_bytes,
                                          uint64_t upload_bytes, double upload_seconds);

// The model version of a float32 update of `layout` that an upload session assembled whole, so
// that its values may be read from where they were spooled a piece at a time (the second
// check_upload): `bytes` long, starting with `header` (its first blob_values_offset(layout)
// bytes, float_blob_header(layout, version)), sealed with `sealed`, the CRC-32 `crc` of every
// byte before it. nullopt for anything else (a compressed update, another layout, a damaged
// one), which view_blob reads whole and names.
std::optional<uint64_t> spooled_float_version(const ModelLayout& layout, std::string_view header,
                                              uint64_t bytes, uint32_t sealed, uint32_t crc);

// Whether the job's updates may arrive in chunks (an upload session): kConflict saying why
// not for a job with secure aggregation (its masked input is sent whole, to its stage) and
// for an asynchronous one (a task carries over from buffer to buffer; a session lives in one).
Status check_chunked_upload(const JobConfig& config);

// The checks a chunk of an update in an upload session passes as it arrives, before the update
// is whole (check_upload runs on the whole one): each value of a float32 update `carried`
// (check_upload's) that lies whole in the chunk is finite, and the parameters among them do
// not already exceed config.max_update_norm (the whole update's norm is at least theirs).
// `offset` is the chunk's first byte in the update; the first chunk must hold a blob of the
// current format (kBlobFormatVersion: its values start at blob_values_offset). A job whose
// updates are compressed gets their values checked at the end only. kUnprocessable naming the
// format, the first value or the norm at fault.
Status check_chunk(const ModelLayout& carried, const JobConfig& config, uint64_t offset,
                   std::string_view chunk);

// How an upload session's update travels: its `bytes` are kept in pieces of `piece_bytes` (the
// last one shorter, maybe), and a chunk carries whole pieces, `chunk_bytes` at most (a whole
// number of pieces). A chunk whose connection drops mid-body keeps the whole pieces that
// arrived, so a client resumes within a chunk, at the last piece's end.
struct UploadGrid {
  uint64_t bytes = 0;
  uint64_t piece_bytes = 0;
  uint64_t chunk_bytes = 0;
  uint64_t pieces() const { return bytes / piece_bytes + (bytes % piece_bytes != 0); }
  // The first byte after the first `pieces` pieces.
  uint64_t end_of(uint64_t pieces) const { return std::min(bytes, pieces * piece_bytes); }
};
// The grid of an update of `bytes` bytes kept in pieces of `piece_bytes` (>= 1), sent in chunks
// of `chunk_bytes` rounded down to whole pieces (one piece at least).
UploadGrid upload_grid(uint64_t bytes, uint64_t piece_bytes, uint64_t chunk_bytes);

// Where a chunk goes: the pieces [first_piece, first_piece + pieces) it carries whole.
struct ChunkPlace {
  uint64_t first_piece = 0;
  uint64_t pieces = 0;  // for a chunk cut short, those that arrived whole (maybe none)
  uint64_t resent = 0;  // how many of them (the first ones) are stored already
  bool last = false;    // it carries the update's last piece
};
// The place of a chunk sent as bytes [range.first, range.last] of range.total, of which
// `arrived` bytes arrived (range.length() for a whole chunk; fewer when its connection dropped
// mid-body), while the session holds its first `stored` pieces; or why it has none:
// kInvalidArgument when range.total is not grid.bytes, the chunk is longer than
// grid.chunk_bytes, starts off a piece, ends (when whole) off a piece and before the update's
// end, or more bytes arrived than it has; kConflict for a chunk starting past the next piece to
// store (a gap), naming the byte to resume from.
Result<ChunkPlace> place_chunk(const UploadGrid& grid, uint64_t stored,
                               const protocol::ContentRange& range, uint64_t arrived);

}  // namespace fedcase::rounds
