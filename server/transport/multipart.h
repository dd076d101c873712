#pragma once
// A bounded parser of multipart/form-data bodies (RFC 7578 over RFC 2046), for job creation
// with an uploaded model: `curl -F config=@job.json -F model=@model.pt`.
//
// Pure functions over the body's bytes; thread-safe. Parts are views into the body, so the
// body must outlive them. Errors are kInvalidArgument with a message fit for the caller.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fedcase::server {

struct MultipartLimits {
  size_t max_parts = 16;           // more parts are refused
  size_t max_header_bytes = 8192;  // of one part's header section
};

struct MultipartPart {
  std::string name;          // Content-Disposition: form-data; name="..." (required)
  std::string filename;      // its filename parameter; empty when absent
  std::string content_type;  // the part's Content-Type; empty when absent
  std::string_view body;     // the part's bytes, a view into the parsed body
};

// The boundary of a Content-Type value "multipart/form-data; boundary=..." (the media type and
// parameter names are case-insensitive, the boundary may be quoted). kInvalidArgument for
// another media type or a missing or malformed boundary (1 to 70 characters, RFC 2046).
Result<std::string> multipart_boundary(std::string_view content_type);

// Whether a Content-Type value names multipart/form-data (whatever its parameters).
bool is_multipart_form_data(std::string_view content_type);

// The parts of `body`, in order. A preamble before the first delimiter and an epilogue after
// the last are ignored. kInvalidArgument for a missing first or closing delimiter, a part
// without a header section end, a header section over the limit or a header line without a
// colon, a part without a form-data Content-Disposition naming it, or more parts than the limit.
Result<std::vector<MultipartPart>> parse_multipart(std::string_view body, std::string_view boundary,
                                                   const MultipartLimits& limits = {});

}  // namespace fedcase::server
