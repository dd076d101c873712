#include "protocol/update_meta.h"

#include <doctest/doctest.h>

#include <limits>

using namespace fedcase;
using namespace fedcase::protocol;
using nlohmann::json;

TEST_CASE("update metadata parses every reported statistic") {
  auto m = read_update_meta({{"samples", 600},
                             {"loss_sum", 300.5},
                             {"loss_sq_sum", 200},
                             {"compute_s", 1.5},
                             {"io_s", 0.25},
                             {"download_s", 0.1},
                             {"cache_hits", 50},
                             {"cache_misses", 550},
                             {"bytes_read", 431200},
                             {"sdk_extra", "ignored"}});
  REQUIRE(m.ok());
  CHECK(m->samples == 600);
  CHECK(m->loss_sum == 300.5);
  CHECK(m->io_s == 0.25);
  CHECK(m->cache_misses == 550);
  CHECK(m->bytes_read == 431200);
  CHECK_FALSE(m->evaluation);
}

TEST_CASE("update metadata carries the client's evaluation of the base model") {
  auto m = read_update_meta(
      {{"samples", 10},
       {"evaluation",
        {{"model_version", 2}, {"samples", 50}, {"loss", 0.4}, {"metrics", {{"accuracy", 0.9}}}}}});
  REQUIRE(m.ok());
  REQUIRE(m->evaluation);
  CHECK(m->evaluation->model_version == 2);
  CHECK(m->evaluation->samples == 50);
  CHECK(m->evaluation->metrics.at("accuracy") == 0.9);
  auto bad = read_update_meta(
      {{"samples", 10}, {"evaluation", {{"model_version", 2}, {"samples", 50}, {"loss", -1}}}});
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK(bad.status().message().find("evaluation.loss") != std::string::npos);
}

TEST_CASE("update metadata rejects what it cannot trust") {
  CHECK_FALSE(read_update_meta(json::array()).ok());
  CHECK(read_update_meta(json::object()).status().message().find("samples") != std::string::npos);
  CHECK_FALSE(read_update_meta({{"samples", 0}}).ok());
  CHECK_FALSE(read_update_meta({{"samples", -3}}).ok());
  CHECK_FALSE(read_update_meta({{"samples", 1.5}}).ok());
  CHECK(read_update_meta({{"samples", 1}, {"loss_sum", -1}}).status().message().find("loss_sum") !=
        std::string::npos);
  CHECK_FALSE(read_update_meta({{"samples", 1}, {"io_s", "fast"}}).ok());
  CHECK_FALSE(read_update_meta({{"samples", 1}, {"cache_hits", -2}}).ok());
}

TEST_CASE("update metadata errors name the field under meta") {
  CHECK(read_update_meta(json::object()).status().message() == "meta.samples is required");
  CHECK(read_update_meta({{"samples", 0}}).status().message() == "meta.samples must be >= 1");
  CHECK(read_update_meta({{"samples", 1}, {"io_s", std::numeric_limits<double>::infinity()}})
            .status()
            .message() == "meta.io_s must be a finite number >= 0");
  CHECK(read_update_meta({{"samples", 1}, {"evaluation", 3}}).status().message() ==
        "meta.evaluation must be an object");
}
