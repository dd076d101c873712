#pragma once
// The task a coordinator offers a client (GET /v1/task, docs/protocol.md): which model to
// fetch, how to train it, how to sample and cache the local data, whether to evaluate, where
// to upload, and by when. The coordinator writes it, the SDK reads it; both through here.
//
// Pure functions over plain values; thread-safe. Untrusted input gives a Status, never an
// exception.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/blob.h"
#include "common/ids.h"
#include "common/status.h"
#include "protocol/sampling.h"
#include "protocol/version.h"

namespace fedcase::protocol {

// The ranges of the training settings, which every trainer accepts (ml/model.h) and a job
// config may ask for (docs/scheduling.md).
inline constexpr uint32_t kMaxBatchSize = 65536;
inline constexpr double kMaxLearningRate = 1000;  // lr in [0, 1000]
inline constexpr double kMaxWeightDecay = 1000;   // weight_decay in [0, 1000]
inline constexpr double kMaxProxMu = 1e6;         // prox_mu in [0, 10^6]
// momentum in [0, 1)

// Local SGD: the task's `train` member. Every member is required.
struct TrainingSettings {
  uint32_t epochs = 1;       // passes over the local samples when the task's sample_budget is 0
  uint32_t batch_size = 32;  // 1 to kMaxBatchSize
  double lr = 0.05;
  double momentum = 0;
  double weight_decay = 0;  // L2 penalty of the local optimizer
  double prox_mu = 0;       // FedProx: adds mu/2 * ||w - w_start||^2 to the loss when > 0

  bool operator==(const TrainingSettings& o) const {
    return epochs == o.epochs && batch_size == o.batch_size && lr == o.lr &&
           momentum == o.momentum && weight_decay == o.weight_decay && prox_mu == o.prox_mu;
  }
  bool operator!=(const TrainingSettings& o) const { return !(*this == o); }
};

// Federated evaluation: the task's `evaluate` member, present when the job asks for one.
struct EvaluationSettings {
  uint64_t max_samples = 0;  // held-out samples to score at most; 0: all of them. Required.

  bool operator==(const EvaluationSettings& o) const { return max_samples == o.max_samples; }
  bool operator!=(const EvaluationSettings& o) const { return !(*this == o); }
};

// How the task's update is compressed before it is uploaded: the task's `compression`, present
// when the job compresses its updates, and the shape of a job config's `compression`
// (docs/aggregation.md, "Compressed updates"). `kind` is required, and the member it uses.
struct Compression {
  // "q8": 8-bit stochastic quantisation in blocks of `block` values (common/blob.h,
  // encode_blob_quantized). "top_k": the `fraction` of the values largest in magnitude, the
  // rest carried on the client to its next update of the job (error feedback).
  std::string kind = "q8";
  uint32_t block = 256;    // q8: 1 to 65536
  double fraction = 0.01;  // top_k: in (0, 1]

  bool operator==(const Compression& o) const {
    return kind == o.kind && block == o.block && fraction == o.fraction;
  }
  bool operator!=(const Compression& o) const { return !(*this == o); }
};

// How the client's sample cache behaves during the task: the task's `cache` member (also the
// shape of a job config's `training.cache`, with defaults there). Every member is required
// but `repetition`, which a coordinator that predates it does not send (absent: kFixed).
struct CacheDirectives {
  CachePolicy policy = CachePolicy::kImportance;
  uint64_t budget_bytes = 4 << 20;  // bytes the cache may hold
  double repetition_factor = 1;     // uses allowed per cache hit within the task, finite, >= 1
  // kFixed: repetition_factor; kAdaptive: the artifact's rule (client::plan_reuse). An SDK
  // that predates `repetition` ignores it and repeats at repetition_factor.
  Repetition repetition = Repetition::kFixed;

  bool operator==(const CacheDirectives& o) const {
    return policy == o.policy && budget_bytes == o.budget_bytes &&
           repetition_factor == o.repetition_factor && repetition == o.repetition;
  }
  bool operator!=(const CacheDirectives& o) const { return !(*this == o); }
};

// Secure aggregation: the task's `secure_aggregation` member, present when the job masks its
// updates (docs/protocol.md, "Secure aggregation"). Either a round's stages (the four stage
// URLs) or, in an asynchronous job whose updates are summed in ready cohorts, a training task's
// `ready_url` alone (docs/secure_aggregation.md, "Asynchronous jobs: ready cohorts").
struct SecAggTask {
  // Paths on the coordinator (as the task's other URLs): POST the advertised keys to keys_url
  // and GET the graph and key list there; POST the shares to shares_url and GET the forwarded
  // shares there; POST the masked vector to masked_input_url; GET the unmask request from
  // unmask_url and POST the answer there. Empty on a ready task.
  std::string keys_url;
  std::string shares_url;
  std::string masked_input_url;
  std::string unmask_url;
  // The longest the key stages and the unmask stage each wait for answers, finite, > 0.
  double stage_seconds = 10;
  // A ready task's: the client trains, keeps its update and POSTs the update's metadata here
  // (no payload); its cohort's task comes later. Empty otherwise.
  std::string ready_url;
  // A cohort's task (the stages over updates its members reported ready): the factor s(tau)
  // in (0, 1] the member's values are scaled by (its staleness, secagg::SecAggClient::
  // mask_input); the member trains nothing. Absent in a synchronous round.
  std::optional<double> staleness_factor;

  bool ready() const { return !ready_url.empty(); }
  bool operator==(const SecAggTask& o) const {
    return keys_url == o.keys_url && shares_url == o.shares_url &&
           masked_input_url == o.masked_input_url && unmask_url == o.unmask_url &&
           ready_url == o.ready_url && stage_seconds == o.stage_seconds &&
           staleness_factor == o.staleness_factor;
  }
  bool operator!=(const SecAggTask& o) const { return !(*this == o); }
};

struct TaskOffer {
  // Read first: a task of a version this build does not read is refused before any other
  // member is looked at (check_task_version).
  uint32_t protocol_version = kProtocolVersion;
  JobId job = 0;
  RoundIndex round = 1;  // >= 1
  std::string model;     // the job's model kind: "cnn", "mlp", "torchscript", "blob"; non-empty
  std::string loss;      // what the client trains on: "cross_entropy", "mse"; non-empty
  uint64_t model_version = 0;
  std::string model_checksum;  // lower-case hex SHA-256 of the model blob (64 characters)
  // A job with a module (torchscript): its checksum (as model_checksum) and URL, both or
  // neither; empty: none.
  std::string module_checksum;
  std::string module_url;
  // Paths on the coordinator, as it sends them: each starts with '/' and holds only printable
  // ASCII without spaces (at most 2,048 bytes).
  std::string model_url;
  std::string upload_url;
  std::string status_url;
  double deadline = 0;  // Unix seconds, finite, >= 0
  TrainingSettings train;
  std::optional<EvaluationSettings> evaluate;  // nullopt: no federated evaluation
  uint64_t sample_budget = 0;  // samples to train on, repeats included; 0: epochs x local data
  Sampling sampling = Sampling::kUniform;
  CacheDirectives cache;
  double expected_duration_s = 0;  // what the coordinator expects the task to take, >= 0
  // nullopt: a plain upload to upload_url; else the stages of secure aggregation replace it.
  std::optional<SecAggTask> secure_aggregation;
  // The buffers of the model this device keeps for itself (a job's local_buffers, by tensor
  // name; at most kMaxTensors of 1 to kMaxTensorNameBytes bytes): it evaluates and trains
  // with its own values of them, once it has some, and uploads a zero delta for them.
  std::vector<std::string> local_buffers;
  // A job that trains part of its model: the tensors it trains (by name, as local_buffers;
  // empty: all of them) and where that part of the round's model is, a model blob of its
  // own (a path as model_url). The update carries those tensors only; a device that holds
  // the rest from an earlier task may download only the part. Both or neither.
  std::vector<std::string> trainable;
  std::string trainable_url;
  std::optional<Compression> compression;  // nullopt: the update is sent as float32
  // Where an upload session opens (protocol/upload_session.h) and the size of its chunks
  // (>= 1): an update larger than chunk_bytes may go in chunks instead of to upload_url.
  // Both or neither (empty, 0: plain uploads only, as a secure round's masked inputs).
  std::string uploads_url;
  uint64_t chunk_bytes = 0;

  bool operator==(const TaskOffer& o) const;
  bool operator!=(const TaskOffer& o) const { return !(*this == o); }
};

// Reads a task: every member is required except module_checksum and module_url (together),
// evaluate and secure_aggregation. kUnprocessable (check_task_version) for a protocol_version this
// build does not read; kInvalidArgument naming the field ("task.train.lr ...") for a missing,
// mistyped or out-of-range one. Unknown keys are ignored.
Result<TaskOffer> read_task_offer(const nlohmann::json& task);
nlohmann::json write_task_offer(const TaskOffer& task);

// The members of a task on their own (the readers read() them inside a task); `where` names
// the object in error messages.
Result<TrainingSettings> read_training_settings(const nlohmann::json& train,
                                                const std::string& where = "train");
nlohmann::json write_training_settings(const TrainingSettings& train);
Result<EvaluationSettings> read_evaluation_settings(const nlohmann::json& evaluate,
                                                    const std::string& where = "evaluate");
nlohmann::json write_evaluation_settings(const EvaluationSettings& evaluate);
Result<SecAggTask> read_secagg_task(const nlohmann::json& secure,
                                    const std::string& where = "secure_aggregation");
nlohmann::json write_secagg_task(const SecAggTask& secure);
Result<CacheDirectives> read_cache_directives(const nlohmann::json& cache,
                                              const std::string& where = "cache");
nlohmann::json write_cache_directives(const CacheDirectives& cache);
Result<Compression> read_compression(const nlohmann::json& compression,
                                     const std::string& where = "compression");
nlohmann::json write_compression(const Compression& compression);

}  // namespace fedcase::protocol
