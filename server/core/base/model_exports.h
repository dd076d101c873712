#pragma once
// A job's committed models as its users take them away (docs/protocol.md, "Models"): every
// version with the round that made it and its recorded accuracy (model_versions), a version
// named by number, "latest" or "best" (resolve_version), and exports of a version in a format
// other frameworks load (ModelExports: TorchScript, the model blob, npz), built once each and
// kept in a small cache.

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/ids.h"
#include "common/mutex.h"
#include "common/status.h"
#include "storage/store.h"

namespace fedcase::server {

enum class ExportFormat { kTorchScript, kBlob, kNpz };
// "torchscript", "blob", "npz".
const char* export_format_name(ExportFormat format);
// The file extension of an export: ".pt", ".blob", ".npz".
const char* export_extension(ExportFormat format);
// The format named `name`; kInvalidArgument naming the formats for any other name.
Result<ExportFormat> parse_export_format(std::string_view name);

// One committed model of a job.
struct ModelVersion {
  uint64_t version = 0;
  std::optional<RoundIndex> round;  // the round that committed it; none for the initial model
  double created_at = 0;
  // As the job's evaluation target records it (rounds::recorded_accuracy): the test accuracy
  // of the model, or the federated accuracy measured by a round that trained from it.
  std::optional<double> accuracy;
};

// The versions of a job created at `created_at` whose rounds are `rounds` (by index), oldest
// first: the initial model 0, then one per committed round, with the accuracies recorded under
// `target` ("server" or "federated"). Pure.
std::vector<ModelVersion> model_versions(const std::vector<storage::RoundRecord>& rounds,
                                         const std::string& target, double created_at);

// The version `selector` names: a decimal number (returned as it is: the store says whether it
// exists), "latest" (the highest in `versions`) or "best" (the highest accuracy; a tie goes to
// the newer version). kInvalidArgument for any other selector; kNotFound for "best" when no
// version has an accuracy yet. Pure.
Result<uint64_t> resolve_version(std::string_view selector,
                                 const std::vector<ModelVersion>& versions);

// A model version in an export format: the file's bytes (shared, never changed) and their
// SHA-256.
struct ModelExport {
  uint64_t version = 0;
  ExportFormat format = ExportFormat::kTorchScript;
  std::string sha256;  // lower-case hex
  std::shared_ptr<const std::string> body;
};

// Builds exports one at a time (so at most one is being built, whatever the number of
// requests) and keeps the most recently used ones while they fit `cache_bytes`; versions never
// change, so a kept export is never stale. Thread-safe.
class ModelExports {
 public:
  // What an export is built from: the job's model kind and module (rounds::JobConfig::model,
  // JobEntry::module) and a way to read the stored model of a version.
  struct Source {
    JobId job = 0;
    std::string kind;
    std::shared_ptr<const std::string> module;
    std::function<Result<storage::ModelRecord>(uint64_t version)> load;
  };

  explicit ModelExports(uint64_t cache_bytes) : cache_bytes_(cache_bytes) {}

  // Version `version` of `source` in `format`: the blob as stored, its parameters as npz
  // (formats::write_npz) or as TorchScript (ml::export_torchscript). Errors: what `load`
  // returns (kNotFound for a version that is not stored); kInvalidArgument for TorchScript of
  // a model uploaded as a blob; kUnprocessable, naming the job, when its module does not load;
  // kInternal for a stored blob that does not decode; the builders' other errors.
  Result<ModelExport> get(const Source& source, uint64_t version, ExportFormat format)
      FEDCASE_EXCLUDES(build_mu_, cache_mu_);

 private:
  using Key = std::tuple<JobId, uint64_t, ExportFormat>;
  struct Entry {
    Key key;
    ModelExport value;
  };
  std::optional<ModelExport> cached(const Key& key) FEDCASE_EXCLUDES(cache_mu_);
  void keep(const Key& key, const ModelExport& value) FEDCASE_EXCLUDES(cache_mu_);

  const uint64_t cache_bytes_;
  Mutex build_mu_;                                        // held while an export is built
  Mutex cache_mu_;                                        // a leaf
  std::list<Entry> cache_ FEDCASE_GUARDED_BY(cache_mu_);  // most recently used first
  uint64_t cached_bytes_ FEDCASE_GUARDED_BY(cache_mu_) = 0;
};

}  // namespace fedcase::server
