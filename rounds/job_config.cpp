#include "rounds/job_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "common/json_read.h"
#include "protocol/registration.h"

namespace fedcase::rounds {
namespace {

using nlohmann::json;

// An error naming `key` unless `value` lies in [min, max] (integer bounds the reader's type
// checks do not already give).
Status check_range(const char* key, size_t value, size_t min, size_t max) {
  if (value >= min && value <= max) return ok_status();
  return invalid_argument(std::string("job.") + key + " must be in [" + std::to_string(min) + ", " +
                          std::to_string(max) + "]");
}

// A server dataset's name: a plain folder name, so it cannot leave datasets_dir.
bool valid_dataset_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

// One sample's input shape: 1 to 8 dimensions of 1 to 2^24 each.
Result<std::vector<int64_t>> parse_input_shape(const json& shape) {
  if (!shape.is_array() || shape.empty() || shape.size() > 8) {
    return invalid_argument("evaluation.input_shape must be an array of 1 to 8 dimensions");
  }
  std::vector<int64_t> out;
  for (const json& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > (1 << 24)) {
      return invalid_argument("evaluation.input_shape dimensions must be integers in [1, 2^24]");
    }
    out.push_back(d.get<int64_t>());
  }
  return out;
}

// The `evaluation` section, whose defaults depend on the model.
Result<EvaluationConfig> parse_evaluation(const json& j, const std::string& model,
                                          bool builtin_model) {
  EvaluationConfig e;
  ObjectReader r(j, "evaluation");
  r.boolean("federated", e.federated).integer("max_samples", e.max_samples);
  r.text("server_dataset", e.server_dataset);
  if (const json* shape = r.member("input_shape")) {
    auto parsed = parse_input_shape(*shape);
    if (!parsed.ok()) return parsed.status();
    e.input_shape = std::move(parsed).value();
  }
  if (!j.is_object() || !j.contains("federated")) e.federated = !builtin_model;
  const bool server = builtin_model || !e.server_dataset.empty();
  e.target = server ? "server" : "federated";
  r.text("target", e.target);
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  if (e.max_samples < 1) {
    return invalid_argument(
        "evaluation.max_samples must be >= 1: a client's evaluation weighs its samples, which "
        "the coordinator bounds");
  }
  if (!e.server_dataset.empty()) {
    if (model != "torchscript") {
      return invalid_argument("evaluation.server_dataset is for TorchScript models");
    }
    if (!valid_dataset_name(e.server_dataset)) {
      return invalid_argument(
          "evaluation.server_dataset must be a folder name of 1 to 64 letters, digits, '.', '_' "
          "or '-', not starting with '.'");
    }
    if (e.input_shape.empty()) {
      return invalid_argument("evaluation.server_dataset needs evaluation.input_shape");
    }
  } else if (!e.input_shape.empty()) {
    return invalid_argument("evaluation.input_shape goes with evaluation.server_dataset");
  }
  if (e.target != "server" && e.target != "federated") {
    return invalid_argument("evaluation.target must be \"server\" or \"federated\"");
  }
  if (e.target == "server" && !server) {
    return invalid_argument(
        "evaluation.target \"server\" needs a built-in model or, for a TorchScript model, "
        "evaluation.server_dataset: the coordinator has nothing to score this model on");
  }
  return e;
}

// The `init_from` section: {"job": id, "version": number | "latest" | "best"}.
Result<InitFrom> parse_init_from(const json& j) {
  InitFrom init;
  ObjectReader r(j, "init_from");
  r.require("job").integer("job", init.job, 1, std::numeric_limits<int64_t>::max());
  if (const json* version = r.member("version")) {
    if (version->is_number_integer() && version->get<int64_t>() >= 0) {
      init.version = std::to_string(version->get<int64_t>());
    } else if (version->is_string() && (*version == "latest" || *version == "best")) {
      init.version = version->get<std::string>();
    } else {
      return invalid_argument(
          "init_from.version must be a model version number, \"latest\" or \"best\"");
    }
  }
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  return init;
}

// The `async` section, for a job with clients_per_round `k`.
Result<AsyncConfig> parse_async(const json& j, size_t k) {
  AsyncConfig a;
  ObjectReader r(j, "async");
  r.integer("concurrency", a.concurrency, 1, 1000000)
      .text("staleness", a.staleness)
      .number("staleness_exponent", a.staleness_exponent, 0, 10)
      .integer("max_staleness", a.max_staleness, 0, 1000000);
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  if (a.staleness != "polynomial" && a.staleness != "constant") {
    return invalid_argument("async.staleness must be \"polynomial\" or \"constant\"");
  }
  if (a.concurrency == 0) a.concurrency = 4 * k;
  return a;
}

// The `secure_aggregation` section of a parsed config `c` (whose other sections are read): the
// rules that need each update, per-update norm checks and buffers cannot see masked updates.
Result<secagg::SecureAggregationConfig> parse_secure(const json& j, const JobConfig& c) {
  auto parsed = secagg::parse_secure_aggregation(j);
  if (!parsed.ok()) return parsed.status();
  secagg::SecureAggregationConfig s = *parsed;
  const aggregation::AggregatorConfig& a = c.aggregation;
  if (a.rule != "fedavg") {
    return invalid_argument("job.secure_aggregation needs aggregation.rule \"fedavg\": \"" +
                            a.rule +
                            "\" needs each update, and the coordinator sees only their sum");
  }
  if (c.max_update_norm > 0) {
    return invalid_argument(
        "job.max_update_norm cannot apply with secure_aggregation: the coordinator never sees "
        "one update; each client clips its own to secure_aggregation.clip before masking it");
  }
  if (s.clip == 0) s.clip = a.clip_norm;
  if (!(s.clip > 0)) {
    return invalid_argument(
        "job.secure_aggregation needs clip (or aggregation.clip_norm): the L2 norm each client "
        "clips its update to before masking it");
  }
  if (a.clip_norm > 0 && s.clip != a.clip_norm) {
    return invalid_argument(
        "secure_aggregation.clip and aggregation.clip_norm must agree: the clients clip");
  }
  if (a.dp_noise_multiplier > 0) {
    // DP-FedAvg counts every client once: each masks the weight 1.
    if (j.is_object() && j.contains("max_weight") && s.max_weight != 1) {
      return invalid_argument(
          "secure_aggregation.max_weight must be 1 with DP: every client counts once");
    }
    s.max_weight = 1;
  }
  // An asynchronous job's cohorts have exactly clients_per_round members.
  if (c.asynchronous() && c.clients_per_round < 2) {
    return invalid_argument(
        "an asynchronous job with secure_aggregation sums cohorts of clients_per_round "
        "updates: clients_per_round must be at least 2");
  }
  // Every round invites at least min_clients: the parameters must exist for that many.
  for (size_t n : {std::max<size_t>(2, c.min_clients), c.clients_per_round,
                   scheduling::invited_count(c.clients_per_round, c.overcommit)}) {
    auto params = secagg::round_params(s, std::max<size_t>(2, n), 1);
    if (!params.ok()) {
      return invalid_argument("job.secure_aggregation does not fit a round of " +
                              std::to_string(n) + " clients: " + params.status().message());
    }
  }
  return s;
}

}  // namespace

double staleness_weight(const AsyncConfig& config, uint64_t tau) {
  if (config.staleness == "constant") return 1.0;
  return std::pow(1.0 + double(tau), -config.staleness_exponent);
}

bool labels_match(const std::map<std::string, std::string>& labels,
                  const std::map<std::string, std::string>& wanted) {
  for (const auto& [key, value] : wanted) {
    auto it = labels.find(key);
    if (it == labels.end() || it->second != value) return false;
  }
  return true;
}

namespace {

// `key` (job.local_buffers, job.trainable): up to kMaxTensors names of 1 to
// kMaxTensorNameBytes bytes, each naming a `what` or a module.
Result<std::vector<std::string>> parse_tensor_names(const json& list, const std::string& key,
                                                    const std::string& what) {
  const Status malformed =
      invalid_argument(key + " must be an array of " + what + " or module names (\"bn1\", "
                       "\"bn1.running_mean\"), each of 1 to " +
                       std::to_string(kMaxTensorNameBytes) + " bytes");
  if (!list.is_array() || list.size() > kMaxTensors) return malformed;
  std::vector<std::string> names;
  for (const json& name : list) {
    if (!name.is_string()) return malformed;
    const std::string& text = name.get_ref<const std::string&>();
    if (text.empty() || text.size() > kMaxTensorNameBytes) return malformed;
    names.push_back(text);
  }
  return names;
}

}  // namespace

Result<JobConfig> parse_job_config(const json& j) {
  JobConfig c;
  json training = json::object(), aggregation = json::object(), evaluation = json::object();
  json async = json::object();
  const json* init_from = nullptr;
  const json* secure = nullptr;
  ObjectReader r(j, "job");
  r.text("name", c.name)
      .text("description", c.description)
      .text("model", c.model)
      .text("loss", c.loss)
      .integer("seed", c.seed)
      .integer("rounds", c.rounds)
      .integer("clients_per_round", c.clients_per_round)
      .integer("min_clients", c.min_clients)
      .integer("min_updates", c.min_updates)
      .number("target_accuracy", c.target_accuracy, 0, 1)
      .number("max_update_norm", c.max_update_norm, 0, 1e12)
      .number("dp_delta", c.dp_delta, 1e-12, 0.1)
      .text("mode", c.mode);
  if (const json* labels = r.member("client_labels")) {
    auto parsed = protocol::read_labels(*labels, "job.client_labels");
    r.merge(parsed.status());
    if (parsed.ok()) c.client_labels = std::move(parsed).value();
  }
  for (auto [key, out] : {std::pair<const char*, json*>{"selection", &c.selection},
                          {"training", &training},
                          {"aggregation", &aggregation},
                          {"server_optimizer", &c.server_optimizer},
                          {"evaluation", &evaluation},
                          {"async", &async}}) {
    if (const json* section = r.member(key)) *out = *section;
  }
  init_from = r.member("init_from");
  secure = r.member("secure_aggregation");
  if (const json* compression = r.member("compression")) {
    auto parsed = protocol::read_compression(*compression, "job.compression");
    r.merge(parsed.status());
    if (parsed.ok()) c.compression = std::move(parsed).value();
  }
  if (const json* local = r.member("local_buffers")) {
    auto parsed = parse_tensor_names(*local, "job.local_buffers", "buffer");
    r.merge(parsed.status());
    if (parsed.ok()) c.local_buffers = std::move(parsed).value();
  }
  if (const json* trainable = r.member("trainable")) {
    auto parsed = parse_tensor_names(*trainable, "job.trainable", "tensor");
    r.merge(parsed.status());
    if (parsed.ok()) c.trainable = std::move(parsed).value();
  }
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  if (init_from) {
    auto parsed = parse_init_from(*init_from);
    if (!parsed.ok()) return parsed.status();
    c.init_from = std::move(parsed).value();
  }
  FEDCASE_RETURN_IF_ERROR(check_range("rounds", c.rounds, 1, 1000000));
  FEDCASE_RETURN_IF_ERROR(check_range("clients_per_round", c.clients_per_round, 1, 1000000));
  FEDCASE_RETURN_IF_ERROR(check_range("min_updates", c.min_updates, 1, c.clients_per_round));
  if (c.name.empty()) return invalid_argument("job.name is required");
  if (c.description.size() > 4096) return invalid_argument("job.description is over 4096 bytes");
  if (!c.builtin_model() && c.model != "torchscript" && c.model != "blob") {
    return invalid_argument("job.model must be \"cnn\", \"mlp\", \"torchscript\" or \"blob\"");
  }
  if (c.loss != "cross_entropy" && c.loss != "mse") {
    return invalid_argument("job.loss must be \"cross_entropy\" or \"mse\"");
  }
  if (c.loss == "mse" && c.builtin_model()) {
    return invalid_argument("job.loss \"mse\" is for uploaded models: the built-in ones classify");
  }
  if (c.loss == "mse" && c.target_accuracy > 0) {
    return invalid_argument("job.target_accuracy needs a classifier: loss \"mse\" has no accuracy");
  }
  auto evaluation_config = parse_evaluation(evaluation, c.model, c.builtin_model());
  if (!evaluation_config.ok()) return evaluation_config.status();
  c.evaluation = std::move(evaluation_config).value();
  if (c.target_accuracy > 0 && c.evaluation.target == "federated" && !c.evaluation.federated) {
    return invalid_argument(
        "job.target_accuracy with evaluation.target \"federated\" needs evaluation.federated");
  }
  if (c.min_clients == 0) c.min_clients = c.clients_per_round;
  if (!c.trainable.empty() && c.builtin_model()) {
    return invalid_argument("job.trainable is for uploaded models: the built-in ones train whole");
  }
  if (!c.local_buffers.empty() && !c.evaluation.server_dataset.empty()) {
    return invalid_argument(
        "evaluation.server_dataset cannot score a model with local_buffers: the coordinator "
        "holds no running statistics of its own, each device keeps its own (federated "
        "evaluation scores the model with them)");
  }

  auto training_params = scheduling::parse_training_params(training);
  if (!training_params.ok()) return training_params.status();
  c.training = std::move(training_params).value();
  auto overcommit = scheduling::selection_overcommit(c.selection);
  if (!overcommit.ok()) return overcommit.status();
  c.overcommit = *overcommit;
  auto aggregation_config = aggregation::parse_aggregator_config(aggregation);
  if (!aggregation_config.ok()) return aggregation_config.status();
  c.aggregation = std::move(aggregation_config).value();
  if (c.aggregation.rule != "fedavg" && c.clients_per_round > c.aggregation.max_buffered_updates) {
    return invalid_argument("job.clients_per_round exceeds aggregation.max_buffered_updates");
  }
  if (c.aggregation.dp_seed) return invalid_argument("aggregation.dp_seed is set per round");
  if (c.mode != "sync" && c.mode != "async") {
    return invalid_argument("job.mode must be \"sync\" or \"async\"");
  }
  if (secure && c.compression && c.compression->kind == "top_k") {
    return invalid_argument(
        "job.compression \"top_k\" cannot go with secure_aggregation: masks cancel only in a "
        "sum of every value of every client, and a sparse update leaves most out");
  }
  if (secure) {
    auto secure_config = parse_secure(*secure, c);
    if (!secure_config.ok()) return secure_config.status();
    c.secure_aggregation = *secure_config;
    // q8 in a secure job: the masked input is already fixed-point; each client's coordinate
    // takes 8 signed bits of it (one scale for every client, so that the sum decodes), and
    // the words carry only the bits the round's sum needs (docs/secure_aggregation.md).
    if (c.compression) c.secure_aggregation->client_bits = 8;
  }
  if (!c.asynchronous()) {
    if (j.is_object() && j.contains("async")) {
      return invalid_argument("job.async goes with \"mode\": \"async\"");
    }
    return c;
  }
  auto async_config = parse_async(async, c.clients_per_round);
  if (!async_config.ok()) return async_config.status();
  c.async = std::move(async_config).value();
  if (c.aggregation.rule != "fedavg") {
    return invalid_argument(
        "job.mode \"async\" needs aggregation.rule \"fedavg\": a buffer's updates are "
        "weighted by their staleness, which the robust rules cannot take");
  }
  return c;
}

Result<JobParts> make_job_parts(JobConfig config) {
  auto policy = scheduling::make_selection_policy(config.selection, config.seed);
  if (!policy.ok()) return policy.status();
  auto optimizer = aggregation::make_server_optimizer(config.server_optimizer);
  if (!optimizer.ok()) return optimizer.status();
  return JobParts{std::move(config), std::move(policy).value(), std::move(optimizer).value()};
}

Result<JobParts> build_job(const json& j) {
  auto config = parse_job_config(j);
  if (!config.ok()) return config.status();
  return make_job_parts(std::move(config).value());
}

bool names_tensor(const std::string& entry, const std::string& name) {
  return name == entry || (name.size() > entry.size() && name.compare(0, entry.size(), entry) == 0 &&
                           name[entry.size()] == '.');
}

bool is_local_buffer(const std::vector<std::string>& local_buffers, const TensorSpec& tensor) {
  if (tensor.kind == TensorKind::kParameter) return false;
  for (const std::string& entry : local_buffers) {
    if (names_tensor(entry, tensor.name)) return true;
  }
  return false;
}

UpdateLayout update_layout(const std::vector<std::string>& trainable, const ModelLayout& model) {
  UpdateLayout out;
  size_t offset = 0;
  for (const TensorSpec& tensor : model.tensors) {
    const size_t count = tensor.element_count();
    const bool trains =
        trainable.empty() || std::any_of(trainable.begin(), trainable.end(), [&](const auto& e) {
          return names_tensor(e, tensor.name);
        });
    if (trains) {
      out.layout.tensors.push_back(tensor);
      out.slices.push_back({offset, count});
    }
    out.whole = out.whole && trains;
    offset += count;
  }
  return out;
}

Status check_model_layout(const JobConfig& config, const ModelLayout& layout) {
  for (const std::string& entry : config.trainable) {
    if (update_layout({entry}, layout).layout.tensors.empty()) {
      return invalid_argument("job.trainable entry \"" + entry +
                              "\" names no tensor of the model, nor a module");
    }
  }
  for (const std::string& entry : config.local_buffers) {
    bool names_one = false;
    for (const TensorSpec& tensor : layout.tensors) {
      names_one = names_one || is_local_buffer({entry}, tensor);
    }
    if (!names_one) {
      return invalid_argument("job.local_buffers entry \"" + entry +
                              "\" names no buffer of the model, nor a module with buffers");
    }
  }
  const TensorSpec* buffer = nullptr;
  for (const TensorSpec& tensor : layout.tensors) {
    if (tensor.kind != TensorKind::kParameter && !is_local_buffer(config.local_buffers, tensor)) {
      buffer = &tensor;
      break;
    }
  }
  if (buffer == nullptr) return ok_status();
  const std::string has = "the model has buffers that travel ('" + buffer->name + "', a " +
                          tensor_kind_name(buffer->kind) + ")";
  if (config.aggregation.dp_noise_multiplier > 0) {
    return invalid_argument(
        has + ", and DP cannot protect them: running statistics are means over a client's "
              "samples that no parameter clip bounds, so they would need their own clip and "
              "noise. Keep them on the devices (local_buffers) or use a model without buffers "
              "(GroupNorm or LayerNorm instead of BatchNorm)");
  }
  if (config.secure_aggregation) {
    return invalid_argument(
        has + ", and secure aggregation cannot carry them: each client clips its whole masked "
              "update to secure_aggregation.clip, which would distort running statistics. Keep "
              "them on the devices (local_buffers) or use a model without buffers (GroupNorm or "
              "LayerNorm instead of BatchNorm)");
  }
  return ok_status();
}

}  // namespace fedcase::rounds
