#pragma once
// The operator's web dashboard (server/api/dashboard/): static files built into the coordinator,
// served without a token at /dashboard/. The page signs in with the admin token, which it
// keeps in the browser session only and sends as a bearer token to the admin API; the files
// themselves hold no data. Chart.js comes from Debian's libjs-chart.js at build time.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fedcase::server {

// One file as dashboard/embed.cmake builds it into the binary.
struct DashboardAsset {
  std::string_view url;           // e.g. "/dashboard/app.js"
  std::string_view content_type;  // with charset for text
  std::string_view body;
};
// Every file of the dashboard; the page itself is "/dashboard/". Static storage.
const std::vector<DashboardAsset>& dashboard_assets();

// A file ready to serve: one shared copy of its body (every response sends it without a copy)
// and an ETag of its content, so a browser revalidates with 304 instead of downloading again.
struct DashboardFile {
  std::string url;
  std::string content_type;
  std::shared_ptr<const std::string> body;
  std::string etag;  // quoted SHA-256 of the body
};
// Built on first use; thread-safe.
const std::vector<DashboardFile>& dashboard_files();

}  // namespace fedcase::server
