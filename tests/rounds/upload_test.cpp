// What an upload's metadata may claim (rounds/upload.h): its samples, its FedAvg weight, are
// bounded by its task, and its evaluation's by the job.

#include "rounds/upload.h"

#include <doctest/doctest.h>

namespace fedcase::rounds {
namespace {

TEST_CASE("an update reports at most its task's whole batches of samples") {
  scheduling::ClientTask task;
  task.samples = 300;
  task.batch_size = 32;
  task.local_steps = 10;  // ceil(300 / 32): the last batch is whole
  CHECK(samples_allowed(task) == 320);
  protocol::UpdateMeta meta;
  meta.samples = 320;
  CHECK(check_samples(meta, samples_allowed(task)).ok());
  meta.samples = 321;
  const Status refused = check_samples(meta, samples_allowed(task));
  CHECK(refused.code() == Code::kInvalidArgument);
  CHECK(refused.message() == "meta.samples: the update reports 321 samples, its task allows at most 320");
  meta.samples = UINT64_MAX;
  CHECK(check_samples(meta, samples_allowed(task)).code() == Code::kInvalidArgument);
  task.local_steps = 0;  // a task without steps still allows its budget
  CHECK(samples_allowed(task) == 300);
}

TEST_CASE("an evaluation reports at most the job's evaluation.max_samples") {
  JobConfig config;
  config.evaluation.max_samples = 100;
  protocol::EvalReport report;
  report.model_version = 4;
  report.samples = 100;
  CHECK(check_evaluation(4, 5, config, report).ok());
  report.samples = 101;
  CHECK(check_evaluation(4, 5, config, report).code() == Code::kUnprocessable);
  CHECK(check_evaluation(4, 5, config, std::nullopt).ok());
}

TEST_CASE("an update is float32 or compressed as its job asks, and checked decoded") {
  const ModelLayout layout{{{"w", {4}}}};
  const ModelBlob update{3, layout, {3, 4, 0, 0}};  // norm 5
  JobConfig config;
  auto check = [&](const std::string& body) {
    BlobView view;
    REQUIRE(view_blob(body, 1 << 20, view).ok());
    return check_upload(layout, 3, 4, config, view, std::nullopt);
  };
  CHECK(check(encode_blob(update)).ok());
  const Status refused = check(encode_blob_quantized(update, 256, 1));
  CHECK(refused.code() == Code::kUnprocessable);
  CHECK(refused.message() == "the update is compressed (8-bit), which the job does not ask for");
  config.compression = protocol::Compression{"top_k", 256, 0.5};
  CHECK(check(encode_blob_sparse(update, {0, 1})).ok());
  CHECK(check(encode_blob(update)).ok());
  CHECK(check(encode_blob_quantized(update, 256, 1)).message() ==
        "the update is compressed (8-bit), which the job does not ask for (it asks top_k)");
  // The norm bound reads the decoded values.
  config.max_update_norm = 4.9;
  CHECK(check(encode_blob_sparse(update, {0, 1})).message().find("exceeds the bound") !=
        std::string::npos);
  CHECK(check(encode_blob_sparse(update, {0})).ok());
}

}  // namespace
}  // namespace fedcase::rounds
