#include "server/api/dashboard.h"

#include "common/crypto.h"

namespace fedcase::server {

const std::vector<DashboardFile>& dashboard_files() {
  static const std::vector<DashboardFile> files = [] {
    std::vector<DashboardFile> out;
    for (const DashboardAsset& asset : dashboard_assets()) {
      out.push_back({std::string(asset.url), std::string(asset.content_type),
                     std::make_shared<const std::string>(asset.body),
                     "\"" + sha256_hex(asset.body) + "\""});
    }
    return out;
  }();
  return files;
}

}  // namespace fedcase::server
