#pragma once
// The operator's web dashboard (server/dashboard/): static files built into the coordinator,
// served without a token at /dashboard/. The page signs in with the admin token, which it
// keeps in the browser session only and sends as a bearer token to the admin API; the files
// themselves hold no data. Chart.js comes from Debian's libjs-chart.js at build time.

#include <string_view>
#include <vector>

namespace fedcase::server {

struct DashboardAsset {
  std::string_view url;           // e.g. "/dashboard/app.js"
  std::string_view content_type;  // with charset for text
  std::string_view body;
};

// Every file of the dashboard; the page itself is "/dashboard/". Static storage.
const std::vector<DashboardAsset>& dashboard_assets();

}  // namespace fedcase::server
