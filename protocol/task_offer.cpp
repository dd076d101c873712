#include "protocol/task_offer.h"

#include <limits>

#include "protocol/internal.h"

namespace fedcase::protocol {
namespace {

constexpr size_t kMaxUrl = 2048;
constexpr size_t kMaxName = 64;

bool is_checksum(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool is_path(const std::string& s) {
  if (s.empty() || s.size() > kMaxUrl || s[0] != '/') return false;
  for (char c : s) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

// Reads the required text member `key` and checks it with `valid` (`rule` says why not).
template <class Valid>
void read_text(ObjectReader& r, const char* key, std::string& out, Valid valid,
               const std::string& rule) {
  r.require(key).text(key, out);
  if (r.status().ok()) internal::check(r, valid(out), key, rule);
}

void read_name(ObjectReader& r, const char* key, std::string& out) {
  read_text(
      r, key, out, [](const std::string& s) { return !s.empty() && s.size() <= kMaxName; },
      "must be 1 to 64 bytes");
}

// Reads the optional member `key`: at most kMaxTensors tensor names of 1 to
// kMaxTensorNameBytes bytes.
void read_tensor_names(ObjectReader& r, const char* key, std::vector<std::string>& out) {
  const nlohmann::json* names = r.member(key);
  if (names == nullptr) return;
  bool valid = names->is_array() && names->size() <= kMaxTensors;
  for (size_t i = 0; valid && i < names->size(); ++i) {
    const nlohmann::json& name = (*names)[i];
    valid = name.is_string() && !name.get_ref<const std::string&>().empty() &&
            name.get_ref<const std::string&>().size() <= kMaxTensorNameBytes;
    if (valid) out.push_back(name.get<std::string>());
  }
  internal::check(r, valid, key,
                  "must be an array of at most " + std::to_string(kMaxTensors) +
                      " tensor names of 1 to " + std::to_string(kMaxTensorNameBytes) + " bytes");
}

void read_path(ObjectReader& r, const char* key, std::string& out) {
  read_text(r, key, out, is_path,
            "must be a path on the coordinator: '/' then printable ASCII, no spaces");
}

}  // namespace

bool TaskOffer::operator==(const TaskOffer& o) const {
  return protocol_version == o.protocol_version && job == o.job && round == o.round &&
         model == o.model && loss == o.loss && model_version == o.model_version &&
         model_checksum == o.model_checksum && module_checksum == o.module_checksum &&
         module_url == o.module_url && model_url == o.model_url && upload_url == o.upload_url &&
         status_url == o.status_url && deadline == o.deadline && train == o.train &&
         evaluate == o.evaluate && sample_budget == o.sample_budget && sampling == o.sampling &&
         cache == o.cache && expected_duration_s == o.expected_duration_s &&
         secure_aggregation == o.secure_aggregation && local_buffers == o.local_buffers &&
         trainable == o.trainable && trainable_url == o.trainable_url &&
         compression == o.compression && uploads_url == o.uploads_url &&
         chunk_bytes == o.chunk_bytes;
}

namespace internal {

Status read(const nlohmann::json& value, const std::string& where, TrainingSettings& out,
            Keys* keys) {
  ObjectReader r(value, where);
  r.require("epochs")
      .integer("epochs", out.epochs)
      .require("batch_size")
      .integer("batch_size", out.batch_size, 1, kMaxBatchSize)
      .require("lr")
      .number("lr", out.lr, 0, kMaxLearningRate)
      .require("momentum")
      .number("momentum", out.momentum, 0, 1)
      .require("weight_decay")
      .number("weight_decay", out.weight_decay, 0, kMaxWeightDecay)
      .require("prox_mu")
      .number("prox_mu", out.prox_mu, 0, kMaxProxMu);
  check(r, out.momentum < 1, "momentum", "must be a number in [0, 1)");
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, EvaluationSettings& out,
            Keys* keys) {
  ObjectReader r(value, where);
  r.require("max_samples").integer("max_samples", out.max_samples);
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, CacheDirectives& out,
            Keys* keys) {
  ObjectReader r(value, where);
  std::string policy;
  std::string repetition = repetition_name(Repetition::kFixed);
  r.require("policy")
      .text("policy", policy)
      .require("budget_bytes")
      .integer("budget_bytes", out.budget_bytes)
      .require("repetition_factor")
      .finite("repetition_factor", out.repetition_factor, 1)
      .text("repetition", repetition);
  if (r.status().ok()) {
    auto parsed = parse_cache_policy(policy);
    check(r, parsed.ok(), "policy", "must be \"importance\", \"lru\" or \"none\"");
    if (parsed.ok()) out.policy = *parsed;
    auto rule = parse_repetition(repetition);
    check(r, rule.ok(), "repetition", "must be \"fixed\" or \"adaptive\"");
    if (rule.ok()) out.repetition = *rule;
  }
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, Compression& out, Keys* keys) {
  ObjectReader r(value, where);
  r.require("kind").text("kind", out.kind);
  if (r.status().ok()) {
    check(r, out.kind == "q8" || out.kind == "top_k", "kind", "must be \"q8\" or \"top_k\"");
  }
  r.integer("block", out.block, 1, 65536);
  if (const nlohmann::json* fraction = r.member("fraction")) {
    check(r, fraction->is_number() && fraction->get<double>() > 0 && fraction->get<double>() <= 1,
          "fraction", "must be a number in (0, 1]");
    if (fraction->is_number()) out.fraction = fraction->get<double>();
  }
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, SecAggTask& out, Keys* keys) {
  ObjectReader r(value, where);
  if (r.member("ready_url") != nullptr) {
    read_path(r, "ready_url", out.ready_url);
  } else {
    read_path(r, "keys_url", out.keys_url);
    read_path(r, "shares_url", out.shares_url);
    read_path(r, "masked_input_url", out.masked_input_url);
    read_path(r, "unmask_url", out.unmask_url);
    r.number("staleness_factor", out.staleness_factor, 0, 1);
    if (r.status().ok() && out.staleness_factor) {
      check(r, *out.staleness_factor > 0, "staleness_factor", "must be in (0, 1]");
    }
  }
  r.require("stage_seconds").finite("stage_seconds", out.stage_seconds, 0);
  if (r.status().ok()) check(r, out.stage_seconds > 0, "stage_seconds", "must be > 0");
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, TaskOffer& out, Keys* keys) {
  ObjectReader r(value, where);
  // The version first: the rest of a task of another version may mean something else.
  r.require("protocol_version").integer("protocol_version", out.protocol_version);
  if (r.status().ok()) r.merge(check_task_version(out.protocol_version));
  if (!r.status().ok()) return finish(r, keys);
  r.require("job_id")
      .integer("job_id", out.job)
      .require("round")
      .integer("round", out.round, 1, std::numeric_limits<RoundIndex>::max());
  read_name(r, "model", out.model);
  read_name(r, "loss", out.loss);
  r.require("model_version").integer("model_version", out.model_version);
  read_text(r, "model_checksum", out.model_checksum, is_checksum,
            "must be 64 lower-case hex digits");
  read_path(r, "model_url", out.model_url);
  read_path(r, "upload_url", out.upload_url);
  read_path(r, "status_url", out.status_url);
  const bool module = r.member("module_checksum") != nullptr;
  if (module || r.member("module_url") != nullptr) {
    read_text(r, "module_checksum", out.module_checksum, is_checksum,
              "must be 64 lower-case hex digits");
    read_path(r, "module_url", out.module_url);
  }
  r.require("deadline").finite("deadline", out.deadline, 0);
  r.require("train");
  read_nested(r, "train", out.train);
  EvaluationSettings evaluate;
  if (read_nested(r, "evaluate", evaluate)) out.evaluate = evaluate;
  r.require("sample_budget").integer("sample_budget", out.sample_budget);
  std::string sampling;
  r.require("sampling").text("sampling", sampling);
  if (r.status().ok()) {
    auto parsed = parse_sampling(sampling);
    check(r, parsed.ok(), "sampling", "must be \"uniform\" or \"importance\"");
    if (parsed.ok()) out.sampling = *parsed;
  }
  r.require("cache");
  read_nested(r, "cache", out.cache);
  r.require("expected_duration_s").finite("expected_duration_s", out.expected_duration_s, 0);
  SecAggTask secure;
  if (read_nested(r, "secure_aggregation", secure)) out.secure_aggregation = secure;
  Compression compression;
  if (read_nested(r, "compression", compression)) out.compression = compression;
  read_tensor_names(r, "local_buffers", out.local_buffers);
  if (r.member("trainable") != nullptr || r.member("trainable_url") != nullptr) {
    read_tensor_names(r, "trainable", out.trainable);
    read_path(r, "trainable_url", out.trainable_url);
  }
  if (r.member("uploads_url") != nullptr || r.member("chunk_bytes") != nullptr) {
    read_path(r, "uploads_url", out.uploads_url);
    r.require("chunk_bytes").integer("chunk_bytes", out.chunk_bytes, 1,
                                     std::numeric_limits<uint64_t>::max());
  }
  return finish(r, keys);
}

}  // namespace internal

Result<TaskOffer> read_task_offer(const nlohmann::json& task) {
  return internal::read_message<TaskOffer>(task, "task");
}

nlohmann::json write_task_offer(const TaskOffer& t) {
  nlohmann::json out = {{"protocol_version", t.protocol_version},
                        {"job_id", t.job},
                        {"round", t.round},
                        {"model", t.model},
                        {"loss", t.loss},
                        {"model_version", t.model_version},
                        {"model_checksum", t.model_checksum},
                        {"model_url", t.model_url},
                        {"upload_url", t.upload_url},
                        {"status_url", t.status_url},
                        {"deadline", t.deadline},
                        {"train", write_training_settings(t.train)},
                        {"sample_budget", t.sample_budget},
                        {"sampling", sampling_name(t.sampling)},
                        {"cache", write_cache_directives(t.cache)},
                        {"expected_duration_s", t.expected_duration_s}};
  if (!t.module_checksum.empty() || !t.module_url.empty()) {
    out["module_checksum"] = t.module_checksum;
    out["module_url"] = t.module_url;
  }
  if (t.evaluate) out["evaluate"] = write_evaluation_settings(*t.evaluate);
  if (t.secure_aggregation) out["secure_aggregation"] = write_secagg_task(*t.secure_aggregation);
  if (!t.local_buffers.empty()) out["local_buffers"] = t.local_buffers;
  if (!t.trainable.empty() || !t.trainable_url.empty()) {
    out["trainable"] = t.trainable;
    out["trainable_url"] = t.trainable_url;
  }
  if (t.compression) out["compression"] = write_compression(*t.compression);
  if (!t.uploads_url.empty() || t.chunk_bytes != 0) {
    out["uploads_url"] = t.uploads_url;
    out["chunk_bytes"] = t.chunk_bytes;
  }
  return out;
}

Result<TrainingSettings> read_training_settings(const nlohmann::json& train,
                                                const std::string& where) {
  return internal::read_message<TrainingSettings>(train, where);
}

nlohmann::json write_training_settings(const TrainingSettings& t) {
  return {{"epochs", t.epochs},     {"batch_size", t.batch_size},     {"lr", t.lr},
          {"momentum", t.momentum}, {"weight_decay", t.weight_decay}, {"prox_mu", t.prox_mu}};
}

Result<EvaluationSettings> read_evaluation_settings(const nlohmann::json& evaluate,
                                                    const std::string& where) {
  return internal::read_message<EvaluationSettings>(evaluate, where);
}

nlohmann::json write_evaluation_settings(const EvaluationSettings& e) {
  return {{"max_samples", e.max_samples}};
}

Result<Compression> read_compression(const nlohmann::json& compression,
                                     const std::string& where) {
  return internal::read_message<Compression>(compression, where);
}

nlohmann::json write_compression(const Compression& c) {
  if (c.kind == "top_k") return {{"kind", c.kind}, {"fraction", c.fraction}};
  return {{"kind", c.kind}, {"block", c.block}};
}

Result<SecAggTask> read_secagg_task(const nlohmann::json& secure, const std::string& where) {
  return internal::read_message<SecAggTask>(secure, where);
}

nlohmann::json write_secagg_task(const SecAggTask& s) {
  if (s.ready()) return {{"ready_url", s.ready_url}, {"stage_seconds", s.stage_seconds}};
  nlohmann::json out = {{"keys_url", s.keys_url},
                        {"shares_url", s.shares_url},
                        {"masked_input_url", s.masked_input_url},
                        {"unmask_url", s.unmask_url},
                        {"stage_seconds", s.stage_seconds}};
  if (s.staleness_factor) out["staleness_factor"] = *s.staleness_factor;
  return out;
}

Result<CacheDirectives> read_cache_directives(const nlohmann::json& cache,
                                              const std::string& where) {
  return internal::read_message<CacheDirectives>(cache, where);
}

nlohmann::json write_cache_directives(const CacheDirectives& c) {
  return {{"policy", cache_policy_name(c.policy)},
          {"budget_bytes", c.budget_bytes},
          {"repetition_factor", c.repetition_factor},
          {"repetition", repetition_name(c.repetition)}};
}

}  // namespace fedcase::protocol
