#include "rounds/job_config.h"

#include <doctest/doctest.h>

namespace fedcase::rounds {
namespace {

using nlohmann::json;

TEST_CASE("job config sections are parsed by the libraries that own them") {
  auto job = parse_job_config({{"name", "j"},
                               {"clients_per_round", 4},
                               {"selection", {{"policy", "fedcase"}, {"overcommit", 1.5}}},
                               {"training", {{"lr", 0.1}, {"momentum", 0.5}}},
                               {"aggregation", {{"rule", "trimmed_mean"}, {"trim_beta", 0.25}}},
                               {"server_optimizer", {{"name", "fedadam"}}}});
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  CHECK(job->overcommit == 1.5);
  CHECK(job->min_clients == 4);  // defaults to K
  CHECK(job->training.learning_rate == 0.1);
  CHECK(job->training.momentum == 0.5);
  CHECK(job->aggregation.rule == "trimmed_mean");
  CHECK(job->aggregation.trim_beta == 0.25);
  auto described = parse_job_config({{"name", "j"}, {"description", "why this job"}});
  REQUIRE(described.ok());
  CHECK(described->description == "why this job");
}

TEST_CASE("job config errors name what is wrong") {
  auto message = [](const json& j) {
    auto r = build_job(j);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    return r.status().message();
  };
  CHECK(message(json::array()).find("must be an object") != std::string::npos);
  CHECK(message({{"model", "cnn"}}).find("name") != std::string::npos);
  CHECK(message({{"name", "j"}, {"description", std::string(4097, 'd')}}).find("description") !=
        std::string::npos);
  CHECK(message({{"name", "j"}, {"model", "resnet"}}).find("model") != std::string::npos);
  CHECK(message({{"name", "j"}, {"rounds", 0}}).find("rounds") != std::string::npos);
  CHECK(
      message({{"name", "j"}, {"clients_per_round", 2}, {"min_updates", 3}}).find("min_updates") !=
      std::string::npos);
  CHECK(message({{"name", "j"}, {"round_deadline", 3}}).find("round_deadline") !=
        std::string::npos);
  CHECK(message({{"name", "j"}, {"training", {{"batch_size", 0}}}}).find("batch_size") !=
        std::string::npos);
  CHECK(message({{"name", "j"}, {"selection", {{"policy", "best"}}}}).find("best") !=
        std::string::npos);
  CHECK(message({{"name", "j"}, {"aggregation", {{"rule", "mode"}}}}).find("mode") !=
        std::string::npos);
  CHECK(message({{"name", "j"}, {"server_optimizer", {{"name", "sgdx"}}}}).find("sgdx") !=
        std::string::npos);
  CHECK(message({{"name", "j"},
                 {"clients_per_round", 20},
                 {"aggregation", {{"rule", "median"}, {"max_buffered_updates", 10}}}})
            .find("max_buffered_updates") != std::string::npos);
}

TEST_CASE("the model kind sets the evaluation defaults") {
  auto builtin = parse_job_config({{"name", "j"}});
  REQUIRE(builtin.ok());
  CHECK(builtin->model == "cnn");
  CHECK(builtin->builtin_model());
  CHECK(builtin->loss == "cross_entropy");
  CHECK_FALSE(builtin->evaluation.federated);
  CHECK(builtin->evaluation.max_samples == EvaluationConfig::kDefaultMaxEvalSamples);
  CHECK(builtin->evaluation.target == "server");
  for (const char* uploaded : {"torchscript", "blob"}) {
    CAPTURE(uploaded);
    auto job = parse_job_config({{"name", "j"}, {"model", uploaded}, {"loss", "mse"}});
    REQUIRE(job.ok());
    CHECK_FALSE(job->builtin_model());
    CHECK(job->loss == "mse");
    CHECK(job->evaluation.federated);
    CHECK(job->evaluation.target == "federated");
  }
  auto chosen = parse_job_config(
      {{"name", "j"},
       {"model", "mlp"},
       {"target_accuracy", 0.8},
       {"evaluation", {{"federated", true}, {"max_samples", 200}, {"target", "federated"}}}});
  REQUIRE_MESSAGE(chosen.ok(), chosen.status().to_string());
  CHECK(chosen->evaluation.federated);
  CHECK(chosen->evaluation.max_samples == 200);
  CHECK(chosen->evaluation.target == "federated");
  // An uploaded model may go without any evaluation, when no target needs one.
  auto unscored =
      parse_job_config({{"name", "j"}, {"model", "blob"}, {"evaluation", {{"federated", false}}}});
  REQUIRE(unscored.ok());
  CHECK_FALSE(unscored->evaluation.federated);
}

TEST_CASE("model, loss and evaluation errors name what is wrong") {
  auto message = [](json patch) {
    json j = {{"name", "j"}};
    j.merge_patch(patch);
    auto r = parse_job_config(j);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    return r.status().message();
  };
  CHECK(message({{"model", "onnx"}}).find("torchscript") != std::string::npos);
  CHECK(message({{"loss", "hinge"}}).find("job.loss") != std::string::npos);
  CHECK(message({{"loss", 1}}).find("job.loss") != std::string::npos);
  CHECK(message({{"loss", "mse"}}).find("uploaded models") != std::string::npos);  // built-in
  CHECK(
      message({{"model", "blob"}, {"loss", "mse"}, {"target_accuracy", 0.9}}).find("classifier") !=
      std::string::npos);
  CHECK(message({{"evaluation", 1}}).find("evaluation must be an object") != std::string::npos);
  CHECK(message({{"evaluation", {{"federated", "yes"}}}}).find("evaluation.federated") !=
        std::string::npos);
  CHECK(message({{"evaluation", {{"max_samples", -1}}}}).find("evaluation.max_samples") !=
        std::string::npos);
  // A client's evaluation weighs its samples: "all of them" is no bound.
  CHECK(message({{"evaluation", {{"max_samples", 0}}}}).find("evaluation.max_samples must be >= 1") !=
        std::string::npos);
  CHECK(message({{"evaluation", {{"target", "client"}}}}).find("evaluation.target") !=
        std::string::npos);
  CHECK(message({{"evaluation", {{"every", 2}}}}).find("evaluation.every") != std::string::npos);
  for (const char* uploaded : {"torchscript", "blob"}) {
    CHECK(message({{"model", uploaded}, {"evaluation", {{"target", "server"}}}})
              .find("built-in model") != std::string::npos);
    CHECK(
        message(
            {{"model", uploaded}, {"target_accuracy", 0.9}, {"evaluation", {{"federated", false}}}})
            .find("needs evaluation.federated") != std::string::npos);
  }
  const json torchscript = {{"model", "torchscript"}};
  auto with = [&](json evaluation) {
    json patch = torchscript;
    patch["evaluation"] = std::move(evaluation);
    return message(patch);
  };
  CHECK(with({{"server_dataset", "eval"}}).find("needs evaluation.input_shape") !=
        std::string::npos);
  CHECK(with({{"input_shape", {8}}}).find("goes with evaluation.server_dataset") !=
        std::string::npos);
  for (const char* name : {"../etc", ".hidden", "a/b", "x y"}) {
    CHECK(with({{"server_dataset", name}, {"input_shape", {8}}}).find("folder name") !=
          std::string::npos);
  }
  CHECK(with({{"server_dataset", "eval"}, {"input_shape", json::array()}}).find("input_shape") !=
        std::string::npos);
  CHECK(with({{"server_dataset", "eval"}, {"input_shape", {0}}}).find("input_shape") !=
        std::string::npos);
  CHECK(message(
            {{"model", "blob"}, {"evaluation", {{"server_dataset", "eval"}, {"input_shape", {8}}}}})
            .find("for TorchScript models") != std::string::npos);
}

TEST_CASE("a TorchScript job with a server dataset is scored by the server by default") {
  auto job = parse_job_config(
      {{"name", "j"},
       {"model", "torchscript"},
       {"evaluation", {{"server_dataset", "sensor-eval_1.0"}, {"input_shape", {1, 28, 28}}}}});
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  CHECK(job->server_evaluated());
  CHECK(job->evaluation.target == "server");
  CHECK(job->evaluation.federated);  // an uploaded model still asks its clients by default
  CHECK(job->evaluation.input_shape == std::vector<int64_t>{1, 28, 28});
  auto federated_target = parse_job_config(
      {{"name", "j"},
       {"model", "torchscript"},
       {"evaluation",
        {{"server_dataset", "eval"}, {"input_shape", {8}}, {"target", "federated"}}}});
  REQUIRE(federated_target.ok());
  CHECK(federated_target->evaluation.target == "federated");
  auto plain = parse_job_config({{"name", "j"}, {"model", "torchscript"}});
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->server_evaluated());
}

TEST_CASE("init_from names a job and a version: a number, latest or best") {
  auto parse = [](json init_from) {
    return parse_job_config({{"name", "j"}, {"init_from", std::move(init_from)}});
  };
  CHECK_FALSE(parse_job_config(json{{"name", "j"}})->init_from);
  auto latest = parse(json{{"job", 3}});
  REQUIRE(latest.ok());
  CHECK(latest->init_from->job == 3);
  CHECK(latest->init_from->version == "latest");
  CHECK(parse(json{{"job", 3}, {"version", 12}})->init_from->version == "12");
  CHECK(parse(json{{"job", 3}, {"version", 0}})->init_from->version == "0");
  CHECK(parse(json{{"job", 3}, {"version", "best"}})->init_from->version == "best");
  auto message = [&](json init_from) {
    auto r = parse(std::move(init_from));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    return r.status().message();
  };
  CHECK(message(json{{"version", 1}}).find("init_from.job is required") != std::string::npos);
  CHECK(message(json{{"job", 0}}).find("init_from.job") != std::string::npos);
  CHECK(message(json{{"job", "3"}}).find("init_from.job") != std::string::npos);
  CHECK(message(json{{"job", 3}, {"version", -1}}).find("init_from.version") != std::string::npos);
  CHECK(message(json{{"job", 3}, {"version", "newest"}}).find("init_from.version") !=
        std::string::npos);
  CHECK(message(json{{"job", 3}, {"from", 1}}).find("init_from.from") != std::string::npos);
  CHECK(message(3).find("init_from") != std::string::npos);
}

TEST_CASE("secure aggregation: its clip, DP's weights and the rules it cannot go with") {
  auto job = parse_job_config({{"name", "j"},
                               {"aggregation", {{"clip_norm", 5}, {"dp_noise_multiplier", 1}}},
                               {"secure_aggregation", {{"threshold", 4}}}});
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  REQUIRE(job->secure_aggregation);
  CHECK(job->secure_aggregation->clip == 5);        // the DP clip: the clients clip to it
  CHECK(job->secure_aggregation->max_weight == 1);  // DP-FedAvg: every client counts once
  auto message = [](json secure, json patch = json::object()) {
    json j = {{"name", "j"}, {"secure_aggregation", secure}};
    j.merge_patch(patch);
    return parse_job_config(j).status().message();
  };
  CHECK(message({{"clip", 1}}, {{"aggregation", {{"rule", "krum"}}}}).find("each update") !=
        std::string::npos);
  CHECK(message({{"clip", 1}}, {{"aggregation", {{"rule", "trimmed_mean"}}}}).find("each update") !=
        std::string::npos);
  CHECK(message({{"clip", 1}}, {{"max_update_norm", 3}}).find("max_update_norm") !=
        std::string::npos);
  // An asynchronous job sums its updates in ready cohorts of K.
  auto cohorts = parse_job_config(
      {{"name", "j"}, {"mode", "async"}, {"secure_aggregation", {{"clip", 1}}}});
  REQUIRE_MESSAGE(cohorts.ok(), cohorts.status().to_string());
  CHECK(cohorts->asynchronous());
  CHECK(cohorts->secure_aggregation);
  CHECK(message(json::object()).find("needs clip") != std::string::npos);
  CHECK(message({{"clip", 2}}, {{"aggregation", {{"clip_norm", 3}}}}).find("agree") !=
        std::string::npos);
  CHECK(message({{"clip", 1}, {"max_weight", 7}},
                {{"aggregation", {{"clip_norm", 1}, {"dp_noise_multiplier", 1}}}})
            .find("max_weight") != std::string::npos);
  // Every round invites at least min_clients (here 3): 5% of 3 is one client, and no graph
  // over 3 clients tolerates one dropout and one corrupt client.
  CHECK(message({{"clip", 1}}, {{"clients_per_round", 3}}).find("does not fit") !=
        std::string::npos);
}

TEST_CASE("a model with buffers cannot have DP or secure aggregation, and is told why") {
  const ModelLayout plain{{{"w", {2}}}};
  const ModelLayout with_bn{{{"w", {2}},
                             {"bn.running_mean", {2}, TensorKind::kFloatBuffer},
                             {"bn.num_batches_tracked", {}, TensorKind::kIntegerBuffer}}};
  auto config = [](json patch) {
    json j = {{"name", "j"}};
    j.merge_patch(patch);
    auto parsed = parse_job_config(j);
    REQUIRE_MESSAGE(parsed.ok(), parsed.status().to_string());
    return *parsed;
  };
  const JobConfig plain_job = config(json::object());
  const JobConfig dp_job =
      config({{"aggregation", {{"clip_norm", 1}, {"dp_noise_multiplier", 1}}}});
  const JobConfig secure_job = config({{"secure_aggregation", {{"clip", 1}}}});
  CHECK(check_model_layout(plain_job, with_bn).ok());
  CHECK(check_model_layout(dp_job, plain).ok());
  CHECK(check_model_layout(secure_job, plain).ok());
  Status dp = check_model_layout(dp_job, with_bn);
  CHECK(dp.code() == Code::kInvalidArgument);
  CHECK(dp.message().find("'bn.running_mean'") != std::string::npos);
  CHECK(dp.message().find("DP cannot protect them") != std::string::npos);
  Status secure = check_model_layout(secure_job, with_bn);
  CHECK(secure.code() == Code::kInvalidArgument);
  CHECK(secure.message().find("secure aggregation cannot carry them") != std::string::npos);

  // Buffers kept on the devices travel nowhere: DP and secure aggregation apply.
  const JobConfig local_dp = config({{"local_buffers", {"bn"}},
                                     {"aggregation", {{"clip_norm", 1}, {"dp_noise_multiplier", 1}}}});
  CHECK(local_dp.local_buffers == std::vector<std::string>{"bn"});
  CHECK(check_model_layout(local_dp, with_bn).ok());
  CHECK(check_model_layout(config({{"local_buffers", {"bn.running_mean"}},
                                   {"secure_aggregation", {{"clip", 1}}}}),
                           with_bn)
            .message()
            .find("'bn.num_batches_tracked'") != std::string::npos);
  CHECK(is_local_buffer({"bn"}, with_bn.tensors[1]));
  CHECK_FALSE(is_local_buffer({"b"}, with_bn.tensors[1]));  // a module's whole name
  CHECK_FALSE(is_local_buffer({"w"}, with_bn.tensors[0]));  // parameters always travel
  CHECK(check_model_layout(config({{"local_buffers", {"w"}}}), with_bn).message() ==
        "job.local_buffers entry \"w\" names no buffer of the model, nor a module with buffers");
  for (const json& bad : {json("bn"), json({1}), json({""}), json::array({std::string(257, 'x')})}) {
    CAPTURE(bad.dump().substr(0, 40));
    json j = {{"name", "j"}, {"local_buffers", bad}};
    CHECK(parse_job_config(j).status().message().find("job.local_buffers must be") !=
          std::string::npos);
  }
  json scored = {{"name", "j"},
                 {"model", "torchscript"},
                 {"local_buffers", {"bn"}},
                 {"evaluation", {{"server_dataset", "d"}, {"input_shape", {4}}}}};
  CHECK(parse_job_config(scored).status().message().find("holds no running statistics") !=
        std::string::npos);
}

TEST_CASE("compression: q8 or top_k, read as the task reads it; top_k never with secure aggregation") {
  auto parsed = parse_job_config({{"name", "j"}, {"compression", {{"kind", "top_k"}, {"fraction", 0.05}}}});
  REQUIRE_MESSAGE(parsed.ok(), parsed.status().to_string());
  REQUIRE(parsed->compression);
  CHECK(parsed->compression->kind == "top_k");
  CHECK(parsed->compression->fraction == 0.05);
  auto q8 = parse_job_config({{"name", "j"}, {"compression", {{"kind", "q8"}}}});
  REQUIRE(q8.ok());
  CHECK(q8->compression->block == 256);
  auto message = [](json compression, json patch = json::object()) {
    json j = {{"name", "j"}, {"compression", compression}};
    j.merge_patch(patch);
    return parse_job_config(j).status().message();
  };
  CHECK(message({{"kind", "zip"}}) == "job.compression.kind must be \"q8\" or \"top_k\"");
  CHECK(message({{"kind", "q8"}, {"block", 0}}).find("job.compression.block") != std::string::npos);
  CHECK(message({{"kind", "top_k"}, {"fraction", 0}}) ==
        "job.compression.fraction must be a number in (0, 1]");
  CHECK(message({{"kind", "top_k"}}, {{"secure_aggregation", {{"clip", 1}}}}).find("masks cancel") !=
        std::string::npos);
  // q8 with secure aggregation: each client's masked coordinate takes 8 bits.
  auto secure_q8 = parse_job_config({{"name", "j"},
                                     {"compression", {{"kind", "q8"}}},
                                     {"secure_aggregation", {{"clip", 1}}}});
  REQUIRE_MESSAGE(secure_q8.ok(), secure_q8.status().to_string());
  CHECK(secure_q8->secure_aggregation->client_bits == 8);
  auto secure = parse_job_config({{"name", "j"}, {"secure_aggregation", {{"clip", 1}}}});
  REQUIRE(secure.ok());
  CHECK(secure->secure_aggregation->client_bits == 0);
}

TEST_CASE("trainable names tensors or modules of an uploaded model") {
  auto parsed = parse_job_config({{"name", "j"}, {"model", "torchscript"}, {"trainable", {"head"}}});
  REQUIRE_MESSAGE(parsed.ok(), parsed.status().to_string());
  const ModelLayout layout{{{"body.weight", {2}}, {"head.weight", {2}}, {"head.bias", {1}}}};
  CHECK(check_model_layout(*parsed, layout).ok());
  CHECK(update_layout(parsed->trainable, layout).layout.describe() == "head.weight[2], head.bias[1]");
  auto builtin = parse_job_config({{"name", "j"}, {"model", "cnn"}, {"trainable", {"fc2"}}});
  CHECK(builtin.status().message().find("uploaded models") != std::string::npos);
  auto malformed = parse_job_config({{"name", "j"}, {"model", "torchscript"}, {"trainable", "head"}});
  CHECK(malformed.status().message().find("job.trainable must be an array") != std::string::npos);
}

}  // namespace
}  // namespace fedcase::rounds
