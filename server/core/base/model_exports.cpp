#include "server/core/base/model_exports.h"

#include <algorithm>

#include "common/blob.h"
#include "common/crypto.h"
#include "formats/npz_writer.h"
#include "ml/export.h"
#include "rounds/evaluation.h"

namespace fedcase::server {
namespace {

struct FormatName {
  ExportFormat format;
  const char* name;
  const char* extension;
};
constexpr FormatName kFormats[] = {{ExportFormat::kTorchScript, "torchscript", ".pt"},
                                   {ExportFormat::kBlob, "blob", ".blob"},
                                   {ExportFormat::kNpz, "npz", ".npz"}};

const FormatName& format_entry(ExportFormat format) {
  for (const FormatName& f : kFormats) {
    if (f.format == format) return f;
  }
  return kFormats[0];
}

// The export's bytes of a stored model.
Result<std::string> build_export(const ModelExports::Source& source,
                                 const storage::ModelRecord& model, ExportFormat format) {
  if (format == ExportFormat::kBlob) return model.blob;
  const std::string job = "job " + std::to_string(source.job);
  if (format == ExportFormat::kTorchScript && source.kind == "blob") {
    return invalid_argument(job + "'s model was uploaded as a blob: it has no TorchScript code " +
                            "to export (export it as npz or blob)");
  }
  auto blob = decode_blob(model.blob, model.blob.size());
  if (!blob.ok()) {
    return internal_error(job + ": stored model version " + std::to_string(model.version) +
                          " does not decode: " + blob.status().message());
  }
  if (format == ExportFormat::kNpz) return formats::write_npz(blob->layout, blob->data);
  static const std::string kNoModule;
  auto archive =
      ml::export_torchscript(source.kind, source.module ? *source.module : kNoModule, blob->data);
  if (!archive.ok() && archive.status().code() == Code::kInvalidArgument) {
    return unprocessable(job + " cannot be exported as TorchScript: " + archive.status().message() +
                         " (its npz and blob exports still work)");
  }
  return archive;
}

}  // namespace

const char* export_format_name(ExportFormat format) { return format_entry(format).name; }
const char* export_extension(ExportFormat format) { return format_entry(format).extension; }

Result<ExportFormat> parse_export_format(std::string_view name) {
  for (const FormatName& f : kFormats) {
    if (name == f.name) return f.format;
  }
  return invalid_argument("format must be \"torchscript\", \"blob\" or \"npz\"");
}

std::vector<ModelVersion> model_versions(const std::vector<storage::RoundRecord>& rounds,
                                         const std::string& target, double created_at) {
  std::vector<ModelVersion> versions{{0, std::nullopt, created_at, std::nullopt}};
  for (const storage::RoundRecord& r : rounds) {
    if (r.state != RoundState::kCommitted) continue;
    versions.push_back(
        {r.metrics.value("model_version", uint64_t(r.index)), r.index, r.closed_at, std::nullopt});
  }
  // A round's accuracy is of the model it committed ("server") or trained from ("federated").
  for (const storage::RoundRecord& r : rounds) {
    const std::optional<double> accuracy = rounds::recorded_accuracy(r.metrics, target);
    if (!accuracy) continue;
    const uint64_t scored =
        target == "server" ? r.metrics.value("model_version", uint64_t(r.index)) : r.base_version;
    for (ModelVersion& v : versions) {
      if (v.version == scored) v.accuracy = accuracy;
    }
  }
  return versions;
}

Result<uint64_t> resolve_version(std::string_view selector,
                                 const std::vector<ModelVersion>& versions) {
  if (selector == "latest") {
    uint64_t latest = 0;
    for (const ModelVersion& v : versions) latest = std::max(latest, v.version);
    return latest;
  }
  if (selector == "best") {
    const ModelVersion* best = nullptr;
    for (const ModelVersion& v : versions) {
      if (v.accuracy && (!best || *v.accuracy >= *best->accuracy)) best = &v;
    }
    if (!best) return not_found("no model version has been evaluated yet");
    return best->version;
  }
  if (!selector.empty() && selector.size() <= 19 &&
      selector.find_first_not_of("0123456789") == std::string_view::npos) {
    return std::stoull(std::string(selector));
  }
  return invalid_argument("version must be a number, \"latest\" or \"best\"");
}

Result<ModelExport> ModelExports::get(const Source& source, uint64_t version, ExportFormat format) {
  const Key key{source.job, version, format};
  if (auto hit = cached(key)) return *hit;
  MutexLock building(build_mu_);
  if (auto hit = cached(key)) return *hit;  // built while this request waited
  auto model = source.load(version);
  if (!model.ok()) return model.status();
  auto bytes = build_export(source, *model, format);
  if (!bytes.ok()) return bytes.status();
  ModelExport out{version, format, sha256_hex(*bytes),
                  std::make_shared<const std::string>(std::move(bytes).value())};
  keep(key, out);
  return out;
}

std::optional<ModelExport> ModelExports::cached(const Key& key) {
  MutexLock lock(cache_mu_);
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->key != key) continue;
    cache_.splice(cache_.begin(), cache_, it);
    return cache_.front().value;
  }
  return std::nullopt;
}

void ModelExports::keep(const Key& key, const ModelExport& value) {
  const uint64_t size = value.body->size();
  if (size > cache_bytes_) return;
  MutexLock lock(cache_mu_);
  cache_.push_front({key, value});
  cached_bytes_ += size;
  while (cached_bytes_ > cache_bytes_) {
    cached_bytes_ -= cache_.back().value.body->size();
    cache_.pop_back();
  }
}

}  // namespace fedcase::server
