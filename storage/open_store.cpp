#include <cctype>

#include "storage/errors.h"
#include "storage/memory_store.h"
#include "storage/store.h"

namespace fedcase::storage {
namespace {

constexpr const char* kSqliteScheme = "sqlite";
constexpr const char* kPostgresScheme = "postgresql";
constexpr const char* kMemoryScheme = "memory";

bool scheme_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
}

}  // namespace

const char* known_store_schemes() { return "sqlite, postgresql, memory"; }

Result<StoreUrl> parse_store_url(const std::string& url) {
  if (url.empty()) return invalid_argument("the database URL is empty");
  StoreUrl parsed{kSqliteScheme, url};
  const size_t colon = url.find(':');
  bool has_scheme =
      colon != std::string::npos && colon > 0 && std::isalpha(static_cast<unsigned char>(url[0]));
  for (size_t i = 0; has_scheme && i < colon; ++i) has_scheme = scheme_char(url[i]);
  if (has_scheme) {
    parsed.scheme = url.substr(0, colon);
    for (char& c : parsed.scheme)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    parsed.location = url.substr(colon + 1);
    if (parsed.scheme == "postgres") parsed.scheme = kPostgresScheme;
    if (parsed.scheme == kPostgresScheme) {
      if (parsed.location.rfind("//", 0) != 0) {
        return invalid_argument("database URL '" + redacted(url) +
                                "' is not postgresql://[user@][host][:port]/database[?...]");
      }
      // libpq reads the scheme only in lower case.
      parsed.location = std::string(kPostgresScheme) + ":" + parsed.location;
    } else if (parsed.scheme == kMemoryScheme) {
      return parsed;  // the location is a name, empty for a database of the store's own
    } else if (parsed.scheme != kSqliteScheme) {
      return invalid_argument("unknown database scheme '" + url.substr(0, colon) + "' in '" +
                              redacted(url) + "' (known: " + known_store_schemes() +
                              ", as sqlite:PATH, postgresql://HOST/DATABASE or memory:[NAME])");
    }
  }
  if (parsed.location.empty()) {
    return invalid_argument("database URL '" + redacted(url) + "' has no path");
  }
  return parsed;
}

Result<std::unique_ptr<Store>> open_store(const std::string& url) {
  auto parsed = parse_store_url(url);
  if (!parsed.ok()) return parsed.status();
  if (parsed->scheme == kPostgresScheme) return open_postgres_store(parsed->location);
  if (parsed->scheme == kMemoryScheme) return open_memory_store(parsed->location);
  return open_sqlite_store(parsed->location);
}

}  // namespace fedcase::storage
