// Fuzzes the chunk header of an upload session: the input is a Content-Range value, as the
// coordinator receives it with a chunk (docs/protocol.md, "Uploads in chunks"), read by
// protocol::parse_content_range and then placed by rounds::place_chunk in a few sessions. A
// range that reads must write back the same text; a chunk that is placed, whole or cut short,
// must carry whole pieces of what arrived, no further than the next piece to store; checking
// a chunk of that range's values (rounds::check_chunk) reads only inside the chunk (under ASan).

#include <algorithm>
#include <cstring>
#include <string>

#include "fuzz/fuzz_target.h"
#include "protocol/upload_session.h"
#include "rounds/upload.h"

FEDCASE_FUZZ_TARGET(upload_chunk) {
  namespace protocol = fedcase::protocol;
  const std::string_view text = fedcase::fuzz::as_text(data, size);
  auto range = protocol::parse_content_range(text);
  if (!range.ok()) return 0;
  if (range->first > range->last || range->last >= range->total) {
    fedcase::fuzz::fuzz_fail("accepted a range outside its total");
  }
  const std::string written = protocol::write_content_range(*range);
  auto again = protocol::parse_content_range(written);
  if (!again.ok() || !(*again == *range)) fedcase::fuzz::fuzz_fail("a range does not read back");
  for (uint64_t piece_bytes : {uint64_t(1), uint64_t(4096), range->total, range->length()}) {
    for (uint64_t chunk_bytes : {piece_bytes, 3 * piece_bytes, range->length()}) {
      const auto grid = fedcase::rounds::upload_grid(range->total, piece_bytes, chunk_bytes);
      for (uint64_t stored : {uint64_t(0), grid.pieces() / 2, grid.pieces()}) {
        for (uint64_t arrived : {range->length(), range->length() / 2}) {
          auto place = fedcase::rounds::place_chunk(grid, stored, *range, arrived);
          if (!place.ok()) continue;
          // Its pieces lie whole in the bytes that arrived, from a piece no further than the
          // next one to store, and it is the last one only when they reach the update's end.
          const uint64_t end = place->first_piece + place->pieces;
          if (place->first_piece > stored || range->first != place->first_piece * piece_bytes ||
              range->length() > grid.chunk_bytes || end > grid.pieces() ||
              grid.end_of(end) > range->first + arrived ||
              place->resent != std::min(place->pieces, stored - place->first_piece) ||
              place->last != (end == grid.pieces() && place->pieces > 0)) {
            fedcase::fuzz::fuzz_fail("placed a chunk where it does not go");
          }
        }
      }
    }
  }
  const fedcase::ModelLayout layout{
      {{"w", {1000}}, {"b", {3}, fedcase::TensorKind::kFloatBuffer}}};
  fedcase::rounds::JobConfig config;
  config.max_update_norm = 1;
  std::string chunk(std::min<uint64_t>(range->length(), 8192), '\x01');  // tiny finite floats
  if (range->first == 0 && chunk.size() >= 8) {  // a blob's start: its magic and format
    const uint32_t format = fedcase::kBlobFormatVersion;
    chunk.replace(0, 4, "FCMB");
    std::memcpy(chunk.data() + 4, &format, sizeof(format));
  }
  if (!fedcase::rounds::check_chunk(layout, config, range->first, chunk).ok()) {
    fedcase::fuzz::fuzz_fail("refused a chunk of finite values within the bound");
  }
  return 0;
}
