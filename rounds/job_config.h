#pragma once
// A job's configuration: the body of POST /v1/admin/jobs, and the `job` a simulation runs.
// One parser serves the coordinator and the simulator, so a config one accepts the other
// accepts too. Each section is parsed by the library that owns it: `selection` and `training`
// by scheduling/, `aggregation` and `server_optimizer` by aggregation/ (docs/scheduling.md,
// docs/aggregation.md); `evaluation` here (docs/protocol.md).

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "aggregation/aggregator.h"
#include "aggregation/server_optimizer.h"
#include "common/ids.h"
#include "common/status.h"
#include "protocol/task_offer.h"
#include "scheduling/round_plan.h"
#include "scheduling/selection.h"
#include "secagg/config.h"

namespace fedcase::rounds {

// How a job's models are scored. Federated evaluation: each task asks its client to score the
// round's base model on its held-out samples before training and to report it with its update.
// Server evaluation: the coordinator scores each committed model itself, a built-in one on its
// Fashion-MNIST test set, a TorchScript one on `server_dataset`, a folder of sample records
// under the coordinator's datasets_dir (docs/protocol.md, "Server evaluation").
struct EvaluationConfig {
  bool federated = false;  // default: true for an uploaded model, false for a built-in one
  // Held-out samples a client scores at most (>= 1): a report weighs its samples in the
  // round's means, so the coordinator bounds them (docs/protocol.md, "Weights").
  size_t max_samples = kDefaultMaxEvalSamples;
  static constexpr size_t kDefaultMaxEvalSamples = 1000;
  // TorchScript models: the dataset the server scores them on (a folder name: letters,
  // digits, '.', '_', '-'; 1 to 64 characters, not starting with '.'), and the shape of one
  // sample's input, which the records do not carry. Empty: no server evaluation.
  std::string server_dataset;
  std::vector<int64_t> input_shape;
  // Whose accuracy target_accuracy is compared with: "server" or "federated". Default:
  // "server" when the server evaluates the model, else "federated".
  std::string target = "server";
};

// Asynchronous training (mode "async"; FedBuff, Nguyen et al., AISTATS 2022): `concurrency`
// clients train at once, each on whatever version it fetched; every `clients_per_round` (K)
// updates, their staleness-weighted sum becomes the next model version (docs/scheduling.md,
// "Asynchronous jobs").
struct AsyncConfig {
  size_t concurrency = 0;  // C, clients training at once; 0: the default, 4 x K
  // An update's staleness tau is the versions the model moved on between the one it trained from
  // and the one its buffer is applied to; it counts s(tau) of its weight: "polynomial",
  // (1 + tau)^-staleness_exponent (FedBuff's), or "constant", 1.
  std::string staleness = "polynomial";
  double staleness_exponent = 0.5;
  uint64_t max_staleness = 10;  // a task further behind is dropped, its update refused
};

// s(tau) of `config` for an update `tau` versions stale: in (0, 1].
double staleness_weight(const AsyncConfig& config, uint64_t tau);

// A trained model a job starts from instead of fresh parameters: version `version` of job
// `job` (docs/protocol.md, "Warm start"). The coordinator checks at creation that its tensors
// have the names and shapes of the new job's model.
struct InitFrom {
  JobId job = 0;
  std::string version = "latest";  // a decimal version number, "latest" or "best"
};

struct JobConfig {
  std::string name;
  std::string description;  // free text for operators (at most 4,096 bytes)
  // A built-in architecture ("cnn", "mlp"), or a model uploaded with the job: "torchscript"
  // (a TorchScript archive, served to clients) or "blob" (a model blob, any framework).
  std::string model = "cnn";
  // What clients train on: "cross_entropy" or "mse".
  std::string loss = "cross_entropy";
  uint64_t seed = 1;              // model init, selection, DP noise
  size_t rounds = 100;            // round cap
  size_t clients_per_round = 10;  // K: updates a round waits for
  size_t min_clients = 0;         // available clients needed to open a round (default K)
  size_t min_updates = 1;         // fewer at the deadline fail the round
  double target_accuracy = 0;     // > 0: the job finishes once a model reaches it
  double max_update_norm = 0;     // > 0: reject updates with a larger L2 norm
  double dp_delta = 1e-5;         // delta at which the privacy spent is reported
  nlohmann::json selection = nlohmann::json::object();
  double overcommit = scheduling::kDefaultOvercommit;  // from selection.overcommit
  scheduling::TrainingParams training;
  aggregation::AggregatorConfig aggregation;
  nlohmann::json server_optimizer = nlohmann::json::object();
  // Only clients registered with every one of these labels take part (empty: every client);
  // the same rule as a registration's labels (protocol::read_labels).
  std::map<std::string, std::string> client_labels;
  EvaluationConfig evaluation;
  std::optional<InitFrom> init_from;  // none: the model's own initial parameters
  // "sync": rounds of K updates from the clients invited at the round's open; "async":
  // buffers of K updates from `async.concurrency` clients training continuously.
  std::string mode = "sync";
  AsyncConfig async;
  // Secure aggregation (SecAgg+, docs/secure_aggregation.md): clients mask their clipped,
  // quantised, weighted updates and the coordinator learns only their sum. none: plain uploads.
  std::optional<secagg::SecureAggregationConfig> secure_aggregation;
  // Buffers each device keeps for itself (FedBN, Li et al., ICLR 2021: BatchNorm's running
  // statistics stay local): each entry names a buffer ("bn1.running_mean") or a module whose
  // buffers all stay ("bn1", "features"). They never leave a device; the committed and
  // exported model keeps their initial values (docs/aggregation.md, "Buffers").
  std::vector<std::string> local_buffers;
  // The tensors the job trains, fine-tuning part of a model (a head, or adapters such as
  // LoRA's): each entry names a tensor ("head.weight") or a module whose tensors all train
  // ("head", "blocks.3"). Empty: every tensor. The others are frozen: the devices keep the
  // model's values of them, and updates, rounds and downloads after the first carry only the
  // trainable tensors (docs/aggregation.md, "Partial training"). Uploaded models only.
  std::vector<std::string> trainable;
  // How clients compress their updates (docs/aggregation.md, "Compressed updates"; the
  // reader of the task's `compression`). nullopt: float32 updates.
  std::optional<protocol::Compression> compression;

  bool asynchronous() const { return mode == "async"; }
  // Whether `model` names a built-in architecture (no model file is uploaded with the job).
  bool builtin_model() const { return model == "cnn" || model == "mlp"; }
  // Whether the coordinator scores the job's committed models (built-in, or TorchScript with
  // a server dataset).
  bool server_evaluated() const { return builtin_model() || !evaluation.server_dataset.empty(); }
};

// Whether `labels` holds every key and value of `wanted`.
bool labels_match(const std::map<std::string, std::string>& labels,
                  const std::map<std::string, std::string>& wanted);

// Validates a job config's fields; kInvalidArgument naming the first bad one ("job.rounds ...").
// The `selection` and `server_optimizer` sections are checked when make_job_parts builds them.
Result<JobConfig> parse_job_config(const nlohmann::json& json);

// A job's config with the selection policy and server optimizer it names, each built once:
// what a JobRuntime runs. Owns both.
struct JobParts {
  JobConfig config;
  std::unique_ptr<scheduling::SelectionPolicy> policy;
  std::unique_ptr<aggregation::ServerOptimizer> optimizer;
};
// Builds the policy and optimizer of a parsed `config`; kInvalidArgument naming the section
// ("selection.policy ...") when one cannot be built.
Result<JobParts> make_job_parts(JobConfig config);
// parse_job_config, then make_job_parts: a job config checked in full and ready to run.
Result<JobParts> build_job(const nlohmann::json& json);

// Whether a job of `config` can train a model of `layout`: each of local_buffers names a
// buffer or a module with buffers, each of trainable a tensor or a module; a model with buffers that travel (not local) cannot have
// DP or secure aggregation, which bound each update by a clip its buffers do not respect.
// kInvalidArgument saying why.
Status check_model_layout(const JobConfig& config, const ModelLayout& layout);

// Whether `entry` names the tensor called `name`: the tensor itself, or a module it lies in.
bool names_tensor(const std::string& entry, const std::string& name);

// Whether `tensor` is one of the buffers `local_buffers` keeps on the devices: a buffer named
// by an entry or lying in a module an entry names.
bool is_local_buffer(const std::vector<std::string>& local_buffers, const TensorSpec& tensor);

// The part of a model an update carries: the tensors a job trains (JobConfig::trainable; all
// of them when it names none), in the model's order, and where each lies in the model's
// values.
struct UpdateLayout {
  ModelLayout layout;
  struct Slice {
    size_t offset;  // of the tensor's first value among the model's
    size_t count;
  };
  std::vector<Slice> slices;  // one per tensor of `layout`
  bool whole = true;          // every tensor of the model
};
UpdateLayout update_layout(const std::vector<std::string>& trainable, const ModelLayout& model);

}  // namespace fedcase::rounds
