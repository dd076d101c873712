// What an upload's metadata may claim (rounds/upload.h): its samples, its FedAvg weight, are
// bounded by its task, and its evaluation's by the job.

#include "rounds/upload.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>

namespace fedcase::rounds {
namespace {

TEST_CASE("an update reports at most its task's whole batches of samples") {
  scheduling::ClientTask task;
  task.samples = 300;
  task.batch_size = 32;
  task.local_steps = 10;  // ceil(300 / 32): the last batch is whole
  CHECK(samples_allowed(task) == 320);
  protocol::UpdateMeta meta;
  meta.samples = 320;
  CHECK(check_samples(meta, samples_allowed(task)).ok());
  meta.samples = 321;
  const Status refused = check_samples(meta, samples_allowed(task));
  CHECK(refused.code() == Code::kInvalidArgument);
  CHECK(refused.message() == "meta.samples: the update reports 321 samples, its task allows at most 320");
  meta.samples = UINT64_MAX;
  CHECK(check_samples(meta, samples_allowed(task)).code() == Code::kInvalidArgument);
  task.local_steps = 0;  // a task without steps still allows its budget
  CHECK(samples_allowed(task) == 300);
}

TEST_CASE("an evaluation reports at most the job's evaluation.max_samples") {
  JobConfig config;
  config.evaluation.max_samples = 100;
  protocol::EvalReport report;
  report.model_version = 4;
  report.samples = 100;
  CHECK(check_evaluation(4, 5, config, report).ok());
  report.samples = 101;
  CHECK(check_evaluation(4, 5, config, report).code() == Code::kUnprocessable);
  CHECK(check_evaluation(4, 5, config, std::nullopt).ok());
}

TEST_CASE("an update is float32 or compressed as its job asks, and checked decoded") {
  const ModelLayout layout{{{"w", {4}}}};
  const ModelBlob update{3, layout, {3, 4, 0, 0}};  // norm 5
  JobConfig config;
  auto check = [&](const std::string& body) {
    BlobView view;
    REQUIRE(view_blob(body, 1 << 20, view).ok());
    return check_upload(layout, 3, 4, config, view, std::nullopt);
  };
  CHECK(check(encode_blob(update)).ok());
  const Status refused = check(encode_blob_quantized(update, 256, 1));
  CHECK(refused.code() == Code::kUnprocessable);
  CHECK(refused.message() == "the update is compressed (8-bit), which the job does not ask for");
  config.compression = protocol::Compression{"top_k", 256, 0.5};
  CHECK(check(encode_blob_sparse(update, {0, 1})).ok());
  CHECK(check(encode_blob(update)).ok());
  CHECK(check(encode_blob_quantized(update, 256, 1)).message() ==
        "the update is compressed (8-bit), which the job does not ask for (it asks top_k)");
  // The norm bound reads the decoded values.
  config.max_update_norm = 4.9;
  CHECK(check(encode_blob_sparse(update, {0, 1})).message().find("exceeds the bound") !=
        std::string::npos);
  CHECK(check(encode_blob_sparse(update, {0})).ok());
}


TEST_CASE("a chunk goes at its place in the grid, in order, or is refused saying why") {
  using protocol::ContentRange;
  // 10 bytes in chunks of 4, one piece each: [0, 4), [4, 8), [8, 10); two stored.
  const UploadGrid grid = upload_grid(10, 4, 4);
  CHECK(grid.pieces() == 3);
  CHECK(upload_grid(8, 4, 4).pieces() == 2);
  CHECK(upload_grid(1, 4, 4).pieces() == 1);
  auto place = [&](uint64_t stored, ContentRange range) {
    return place_chunk(grid, stored, range, range.length());
  };
  auto next = place(2, {8, 9, 10});
  REQUIRE(next.ok());
  CHECK(next->first_piece == 2);
  CHECK(next->pieces == 1);
  CHECK(next->resent == 0);
  CHECK(next->last);
  auto resent = place(2, {4, 7, 10});
  REQUIRE(resent.ok());
  CHECK(resent->first_piece == 1);
  CHECK(resent->resent == 1);
  CHECK_FALSE(resent->last);
  CHECK(place(0, {0, 3, 10})->first_piece == 0);
  // A gap is a conflict naming the byte to go on from.
  auto gap = place(1, {8, 9, 10});
  CHECK(gap.status().code() == Code::kConflict);
  CHECK(gap.status().message().find("at byte 4 next") != std::string::npos);
  for (const ContentRange& bad : {ContentRange{0, 3, 11},   // another size
                                  ContentRange{1, 4, 10},   // off the grid
                                  ContentRange{0, 2, 10},   // short
                                  ContentRange{0, 7, 10},   // two chunks
                                  ContentRange{8, 8, 10}}) {  // the last one, short
    CAPTURE(bad.first);
    CAPTURE(bad.last);
    CHECK(place(2, bad).status().code() == Code::kInvalidArgument);
  }
  CHECK(place_chunk(grid, 2, {8, 9, 10}, 3).status().code() == Code::kInvalidArgument);
}

TEST_CASE("a chunk is whole pieces; cut short, it keeps the pieces that arrived whole") {
  using protocol::ContentRange;
  // 22 bytes in pieces of 4, chunks of 10 rounded down to 8 (two pieces): three pieces stored.
  const UploadGrid grid = upload_grid(22, 4, 10);
  CHECK(grid.chunk_bytes == 8);
  CHECK(grid.pieces() == 6);
  CHECK(grid.end_of(3) == 12);
  CHECK(grid.end_of(6) == 22);
  // A chunk of two pieces from the next one; one of a piece; the last one, shorter.
  auto two = place_chunk(grid, 3, {12, 19, 22}, 8);
  REQUIRE(two.ok());
  CHECK(two->first_piece == 3);
  CHECK(two->pieces == 2);
  CHECK(two->resent == 0);
  CHECK(place_chunk(grid, 3, {12, 15, 22}, 4)->pieces == 1);
  auto last = place_chunk(grid, 5, {20, 21, 22}, 2);
  REQUIRE(last.ok());
  CHECK(last->last);
  CHECK(last->pieces == 1);
  // Resent from an earlier piece: those stored already are counted, the rest are new.
  auto overlap = place_chunk(grid, 3, {8, 15, 22}, 8);
  REQUIRE(overlap.ok());
  CHECK(overlap->first_piece == 2);
  CHECK(overlap->pieces == 2);
  CHECK(overlap->resent == 1);
  // Cut short: the whole pieces that arrived (none, one), never a part of one; a cut last
  // chunk never keeps its last piece.
  CHECK(place_chunk(grid, 3, {12, 19, 22}, 3)->pieces == 0);
  auto cut = place_chunk(grid, 3, {12, 19, 22}, 7);
  REQUIRE(cut.ok());
  CHECK(cut->pieces == 1);
  CHECK_FALSE(cut->last);
  auto cut_last = place_chunk(grid, 4, {16, 21, 22}, 5);
  REQUIRE(cut_last.ok());
  CHECK(cut_last->pieces == 1);
  CHECK_FALSE(cut_last->last);
  // Off a piece, or longer than a chunk: refused, cut or not.
  CHECK(place_chunk(grid, 3, {12, 21, 22}, 10).status().code() == Code::kInvalidArgument);
  CHECK(place_chunk(grid, 3, {12, 21, 22}, 5).status().code() == Code::kInvalidArgument);
  CHECK(place_chunk(grid, 3, {10, 15, 22}, 3).status().code() == Code::kInvalidArgument);
  CHECK(place_chunk(grid, 3, {12, 17, 22}, 6).status().code() == Code::kInvalidArgument);
  CHECK(place_chunk(grid, 3, {12, 17, 22}, 5)->pieces == 1);  // cut: its whole piece kept
  // A chunk smaller than a piece is one piece.
  CHECK(upload_grid(100, 64, 16).chunk_bytes == 64);
}

TEST_CASE("a chunk's whole values are finite and its parameters within the norm bound") {
  // Parameters w[6], then a buffer b[2]: values 0-5 are counted in the norm, 6-7 are not.
  const ModelLayout layout{{{"w", {6}}, {"b", {2}, TensorKind::kFloatBuffer}}};
  ModelBlob update{3, layout, {1, 1, 1, 1, 1, 1, 50, 50}};
  std::string body = encode_blob(update);
  const uint64_t start = blob_values_offset(layout);
  CHECK(body.size() == start + 8 * sizeof(float) + 4);  // the header, the values, the CRC
  JobConfig config;
  // Chunks of 10 bytes: whatever value lies whole in a chunk is checked there.
  auto check_all = [&](const std::string& bytes) -> Status {
    for (size_t offset = 0; offset < bytes.size(); offset += 10) {
      FEDCASE_RETURN_IF_ERROR(
          check_chunk(layout, config, offset, std::string_view(bytes).substr(offset, 10)));
    }
    return ok_status();
  };
  CHECK(check_all(body).ok());
  for (size_t bad = 0; bad < 8; ++bad) {
    CAPTURE(bad);
    ModelBlob poisoned = update;
    poisoned.data[bad] = std::nanf("");
    const std::string bytes = encode_blob(poisoned);
    // In its own chunk, whole or not: a value cut by a chunk's edge is checked at the end.
    const uint64_t at = start + bad * sizeof(float);
    const bool whole = at / 10 == (at + 3) / 10;
    const Status s = check_chunk(layout, config, at / 10 * 10,
                                 std::string_view(bytes).substr(at / 10 * 10, 10));
    CHECK(s.ok() == !whole);
    if (whole) CHECK(s.message() == "update value " + std::to_string(bad) + " is not finite");
  }
  // The norm: the buffer's 50s count for nothing; one chunk's parameters over the bound are.
  config.max_update_norm = 1.5;
  CHECK(check_chunk(layout, config, start, std::string_view(body).substr(start, 8)).ok());
  const Status over = check_chunk(layout, config, start, std::string_view(body).substr(start, 12));
  CHECK(over.code() == Code::kUnprocessable);
  CHECK(over.message().find("in values 0 to 2 alone") != std::string::npos);
  CHECK(check_chunk(layout, config, start + 24, std::string_view(body).substr(start + 24, 8)).ok());
  // An update sent in chunks is a blob of the current format: its first chunk says so.
  std::string older = body;
  older[4] = 1;  // format 1 had no tensor kinds: its values start elsewhere
  CHECK(check_chunk(layout, config, 0, std::string_view(older).substr(0, 10)).message() ==
        "an update sent in chunks is a blob of format 2, not 1");
  // A compressed update's values are checked whole, at the end.
  config.compression = protocol::Compression{};
  update.data[0] = std::nanf("");
  CHECK(check_all(encode_blob(update)).ok());
}

TEST_CASE("updates go in chunks for plain synchronous jobs only") {
  JobConfig config;
  CHECK(check_chunked_upload(config).ok());
  config.mode = "async";
  CHECK(check_chunked_upload(config).code() == Code::kConflict);
}

TEST_CASE("a float32 update of the job's layout, sealed by its CRC, is read from its spool file") {
  const ModelLayout layout{{{"w", {3}}, {"b", {2}}}};
  const std::string blob = encode_blob(ModelBlob{7, layout, {1, 2, 3, 4, 5}});
  const uint64_t header_bytes = blob_values_offset(layout);
  const std::string_view header = std::string_view(blob).substr(0, header_bytes);
  uint32_t sealed = 0;
  std::memcpy(&sealed, blob.data() + blob.size() - 4, 4);
  const uint32_t crc = crc32_of(std::string_view(blob).substr(0, blob.size() - 4));
  CHECK(spooled_float_version(layout, header, blob.size(), sealed, crc) == 7u);
  // Anything else is read whole, where view_blob names the fault.
  CHECK_FALSE(spooled_float_version(layout, header, blob.size(), sealed, crc + 1));
  CHECK_FALSE(spooled_float_version(layout, header, blob.size() + 4, sealed, crc));
  const ModelLayout other{{{"w", {5}}}};
  CHECK_FALSE(spooled_float_version(other, header, blob.size(), sealed, crc));
  const std::string q8 = encode_blob_quantized(ModelBlob{7, layout, {1, 2, 3, 4, 5}}, 256, 1);
  CHECK_FALSE(spooled_float_version(layout, std::string_view(q8).substr(0, header_bytes),
                                    blob.size(), sealed, crc));
}

}  // namespace
}  // namespace fedcase::rounds
