#include "aggregation/aggregator.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "aggregation/fedavg.h"
#include "aggregation/robust.h"
#include "test_util.h"
#include "tests/support/temp_dir.h"

using namespace fedcase;
using namespace fedcase::aggregation;
using fedcase::aggregation::testing::pointers;
using fedcase::aggregation::testing::random_updates;
using fedcase::aggregation::testing::VectorReader;

namespace {

std::unique_ptr<Aggregator> make(const nlohmann::json& config, UpdateShape shape) {
  auto agg = make_aggregator(config, shape);
  REQUIRE_MESSAGE(agg.ok(), agg.status().to_string());
  return std::move(*agg);
}

std::string error(const nlohmann::json& config) {
  return parse_aggregator_config(config).status().message();
}

void add_all(Aggregator& agg, const std::vector<std::vector<float>>& updates) {
  for (size_t i = 0; i < updates.size(); ++i) {
    REQUIRE(agg.add(updates[i].data(), updates[i].size(), 1.0 + static_cast<double>(i)).ok());
  }
}

}  // namespace

TEST_CASE("aggregation config: defaults, per-rule keys and ranges") {
  auto defaults = parse_aggregator_config(nlohmann::json::object());
  REQUIRE(defaults.ok());
  CHECK(defaults->rule == "fedavg");
  CHECK(defaults->threads == kDefaultThreads);
  CHECK(defaults->max_buffered_updates == 1000);
  auto mk = parse_aggregator_config({{"rule", "multi_krum"},
                                     {"byzantine_f", 2},
                                     {"multi_krum_m", 5},
                                     {"clip_norm", 10},
                                     {"max_buffered_updates", 50},
                                     {"threads", 4}});
  REQUIRE(mk.ok());
  CHECK(mk->byzantine_f == 2);
  CHECK(mk->multi_krum_m == 5);
  CHECK(mk->max_buffered_updates == 50);

  CHECK(error({{"rule", "mean"}}).find("aggregation.rule must be") != std::string::npos);
  CHECK(error({{"rule", "mean"}}).find("\"mean\"") != std::string::npos);
  CHECK(error({{"rule", "median"}, {"trim_beta", 0.1}}) == "unknown key aggregation.trim_beta");
  CHECK(error({{"rule", "fedavg"}, {"max_buffered_updates", 5}}) ==
        "unknown key aggregation.max_buffered_updates");
  CHECK(error({{"rule", "median"}, {"clip_nrom", 1}}) == "unknown key aggregation.clip_nrom");
  CHECK(error({{"rule", "trimmed_mean"}, {"trim_beta", 0.5}}) ==
        "aggregation.trim_beta must be a number in [0, 0.5)");
  CHECK(error({{"rule", "trimmed_mean"}, {"trim_beta", -0.1}}).find("aggregation.trim_beta") !=
        std::string::npos);
  const std::string negative = error({{"rule", "krum"}, {"byzantine_f", -1}});
  CHECK(negative.find("aggregation.byzantine_f must be an integer in [0, ") != std::string::npos);
  CHECK(error({{"threads", 0}}) == "aggregation.threads must be an integer in [1, 64]");
  CHECK(error({{"threads", 65}}) == "aggregation.threads must be an integer in [1, 64]");
  CHECK(error({{"clip_norm", -1}}).find("aggregation.clip_norm must be a number") !=
        std::string::npos);
  CHECK(error({{"clip_norm", "10"}}).find("aggregation.clip_norm must be a number") !=
        std::string::npos);
  CHECK(error({{"rule", 3}}) == "aggregation.rule must be a string");
  CHECK(error({{"rule", "median"}, {"max_buffered_updates", 0}}).find("at least 1") !=
        std::string::npos);
  CHECK(error({{"dp_noise_multiplier", 1.0}}).find("clip_norm > 0") != std::string::npos);
  CHECK(error({{"rule", "krum"}, {"dp_noise_multiplier", 1.0}}) ==
        "unknown key aggregation.dp_noise_multiplier");
  CHECK(error({{"rule", "krum"}, {"byzantine_f", 1.5}}).find("aggregation.byzantine_f") !=
        std::string::npos);
  CHECK(error({{"dp_seed", -3}}).find("aggregation.dp_seed") != std::string::npos);
  CHECK(error({{"rule", "krum"}, {"byzantine_f", 10}, {"max_buffered_updates", 10}})
            .find("below max_buffered_updates") != std::string::npos);
  CHECK(error({{"rule", "multi_krum"},
               {"byzantine_f", 1},
               {"multi_krum_m", 11},
               {"max_buffered_updates", 10}})
            .find("multi_krum_m") != std::string::npos);
  CHECK(error(nlohmann::json::array()) == "aggregation must be an object");

  AggregatorConfig direct;
  direct.rule = "median";
  direct.threads = 100;
  CHECK(make_aggregator(direct, 4).status().code() == Code::kInvalidArgument);
}

TEST_CASE("each rule fed one update at a time equals its batch computation") {
  const size_t params = 50001;
  auto updates = random_updates(9, params, 3);
  const UpdateBatch batch{pointers(updates), params};
  WorkerPool pool(2);

  auto fedavg = make({{"rule", "fedavg"}}, params);
  StreamingFedAvg reference(params, 1);
  for (size_t i = 0; i < updates.size(); ++i) {
    REQUIRE(reference.add(updates[i].data(), params, 1.0 + static_cast<double>(i)).ok());
  }
  add_all(*fedavg, updates);
  CHECK(*fedavg->result() == *reference.mean());

  struct Case {
    nlohmann::json config;
    Result<std::vector<float>> expected;
  };
  const Case cases[] = {
      {{{"rule", "median"}}, coordinate_median(batch, pool)},
      {{{"rule", "trimmed_mean"}, {"trim_beta", 0.2}}, trimmed_mean(batch, 0.2, pool)},
      {{{"rule", "krum"}, {"byzantine_f", 2}}, multi_krum(batch, 2, 1, pool)},
      {{{"rule", "multi_krum"}, {"byzantine_f", 2}, {"multi_krum_m", 4}},
       multi_krum(batch, 2, 4, pool)},
      {{{"rule", "multi_krum"}, {"byzantine_f", 3}}, multi_krum(batch, 3, 6, pool)},  // m = n - f
  };
  for (const Case& c : cases) {
    CAPTURE(c.config.dump());
    auto agg = make(c.config, params);
    CHECK(agg->name() == c.config["rule"]);
    add_all(*agg, updates);
    CHECK(agg->updates() == updates.size());
    REQUIRE(c.expected.ok());
    CHECK(*agg->result() == *c.expected);
  }
}

TEST_CASE("every rule reads updates at any alignment, as they lie in their blobs") {
  const size_t params = 40001;
  auto updates = random_updates(7, params, 5);
  const nlohmann::json configs[] = {{{"rule", "fedavg"}},
                                    {{"rule", "fedavg"}, {"clip_norm", 5.0}},
                                    {{"rule", "median"}},
                                    {{"rule", "multi_krum"}, {"byzantine_f", 1}}};
  for (const nlohmann::json& config : configs) {
    CAPTURE(config.dump());
    auto aligned = make(config, params);
    add_all(*aligned, updates);
    // The same values 1, 2 and 3 bytes past an aligned address.
    for (size_t offset = 1; offset < sizeof(float); ++offset) {
      CAPTURE(offset);
      auto shifted = make(config, params);
      for (size_t i = 0; i < updates.size(); ++i) {
        std::vector<char> bytes(params * sizeof(float) + offset);
        std::memcpy(bytes.data() + offset, updates[i].data(), params * sizeof(float));
        const auto* values = reinterpret_cast<const UnalignedFloat*>(bytes.data() + offset);
        REQUIRE(shifted->add(values, params, 1.0 + static_cast<double>(i)).ok());
      }
      CHECK(*shifted->result() == *aligned->result());
    }
  }
}

TEST_CASE("robust rules out-vote an attacker that fedavg follows") {
  // Three honest updates at 1 and two attackers at 100, each claiming a huge sample count.
  std::vector<std::vector<float>> fleet = {
      {1, 1}, {1.1f, 0.9f}, {0.9f, 1.1f}, {100, 100}, {100, -100}};
  std::vector<double> weights = {10, 10, 10, 1e6, 1e6};
  for (std::string rule : {"fedavg", "median", "trimmed_mean", "krum", "multi_krum"}) {
    CAPTURE(rule);
    nlohmann::json config = {{"rule", rule}};
    if (rule == "trimmed_mean") config["trim_beta"] = 0.4;
    if (rule == "krum" || rule == "multi_krum") config["byzantine_f"] = 1;
    if (rule == "multi_krum") config["multi_krum_m"] = 2;
    auto agg = make(config, 2);
    for (size_t i = 0; i < fleet.size(); ++i)
      REQUIRE(agg->add(fleet[i].data(), 2, weights[i]).ok());
    auto r = *agg->result();
    if (rule == "fedavg") {
      CHECK(r[0] > 50);
    } else {
      CHECK(std::fabs(r[0] - 1) < 0.11);
      CHECK(std::fabs(r[1] - 1) < 0.11);
    }
  }
}

TEST_CASE("clip_norm scales every update into the ball before any rule sees it") {
  std::vector<std::vector<float>> updates = {{3, 4}, {0.3f, 0.4f}};  // norms 5 and 0.5
  auto fedavg = make({{"rule", "fedavg"}, {"clip_norm", 1.0}}, 2);
  REQUIRE(fedavg->add(updates[0].data(), 2, 1).ok());
  REQUIRE(fedavg->add(updates[1].data(), 2, 3).ok());
  auto mean = *fedavg->result();  // (1 * (0.6, 0.8) + 3 * (0.3, 0.4)) / 4
  CHECK(mean[0] == doctest::Approx((0.6 + 0.9) / 4));
  CHECK(mean[1] == doctest::Approx((0.8 + 1.2) / 4));

  auto median = make({{"rule", "median"}, {"clip_norm", 1.0}}, 2);
  add_all(*median, updates);
  auto med = *median->result();  // median of the clipped (0.6, 0.8) and (0.3, 0.4)
  CHECK(med[0] == doctest::Approx(0.45));
  CHECK(med[1] == doctest::Approx(0.6));
}

TEST_CASE("buffers are averaged by every rule, never clipped or compared") {
  // Two parameters, then one buffer value (a running variance's delta).
  const UpdateShape shape{3, 2};
  std::vector<std::vector<float>> updates = {{3, 4, 10}, {0.3f, 0.4f, 20}};
  auto fedavg = make({{"rule", "fedavg"}, {"clip_norm", 1.0}}, shape);
  REQUIRE(fedavg->add(updates[0].data(), 3, 1).ok());
  REQUIRE(fedavg->add(updates[1].data(), 3, 3).ok());
  auto mean = *fedavg->result();  // parameters clipped by their own norm; buffer as sent
  CHECK(mean[0] == doctest::Approx((0.6 + 0.9) / 4));
  CHECK(mean[1] == doctest::Approx((0.8 + 1.2) / 4));
  CHECK(mean[2] == doctest::Approx((10 + 3 * 20) / 4.0));

  auto median = make({{"rule", "median"}, {"clip_norm", 1.0}}, shape);
  add_all(*median, updates);
  auto med = *median->result();
  CHECK(med[0] == doctest::Approx(0.45));
  CHECK(med[2] == doctest::Approx(15));

  // Krum picks by the parameters: the buffer of the outlying update does not sway it.
  auto krum = make({{"rule", "krum"}}, shape);
  add_all(*krum, {{0, 0, 1000}, {0.1f, 0, 0}, {0, 0.1f, 0}, {9, 9, 0}});
  CHECK(*krum->result() == std::vector<float>{0, 0, 1000});

  // DP noise goes on the parameters only.
  auto dp = make(
      {{"rule", "fedavg"}, {"clip_norm", 1.0}, {"dp_noise_multiplier", 1.0}, {"dp_seed", 3}},
      shape);
  REQUIRE(dp->add(updates[0].data(), 3, 1).ok());
  auto noisy = *dp->result();
  CHECK(noisy[0] != doctest::Approx(0.6));
  CHECK(noisy[2] == 10);

  CHECK(make_aggregator(nlohmann::json{{"rule", "fedavg"}}, UpdateShape{2, 3}).status().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("compressed updates fold as their decoded values do, without a dense copy") {
  const size_t n = 3 * kDecodePiece + 123;  // pieces, and a short last one
  const ModelLayout layout{{{"w", {n - 7}}, {"bn.running_var", {7}, TensorKind::kFloatBuffer}}};
  const UpdateShape shape{n, n - 7};
  std::vector<std::string> bodies;
  for (uint64_t u = 0; u < 4; ++u) {
    ModelBlob update{0, layout, std::vector<float>(n)};
    for (size_t i = 0; i < n; ++i) update.data[i] = std::cos(float(i * (u + 1))) * float(u + 1);
    std::vector<uint32_t> kept;
    for (uint32_t i = u; i < n; i += 5) kept.push_back(i);
    bodies.push_back(u % 2 == 0 ? encode_blob_quantized(update, 256, u)
                                : encode_blob_sparse(update, kept));
  }
  for (const nlohmann::json& config :
       {nlohmann::json{{"rule", "fedavg"}}, nlohmann::json{{"rule", "fedavg"}, {"clip_norm", 2.0}},
        nlohmann::json{{"rule", "median"}, {"clip_norm", 2.0}}}) {
    CAPTURE(config.dump());
    auto compressed = make(config, shape);
    auto dense = make(config, shape);
    for (size_t u = 0; u < bodies.size(); ++u) {
      BlobView view;
      REQUIRE(view_blob(bodies[u], 1 << 24, view).ok());
      REQUIRE(compressed->add(view, 1.0 + double(u), 1.0).ok());
      auto decoded = decode_blob(bodies[u], 1 << 24);
      REQUIRE(dense->add(decoded->data.data(), n, 1.0 + double(u)).ok());
    }
    CHECK(*compressed->result() == *dense->result());
  }
}

TEST_CASE("updates read a piece at a time fold as those in memory do") {
  const size_t n = 5 * kDecodePiece + 17;
  const auto updates = random_updates(3, n, 11);
  for (const nlohmann::json& config :
       {nlohmann::json{{"rule", "fedavg"}}, nlohmann::json{{"rule", "fedavg"}, {"clip_norm", 2.0}},
        nlohmann::json{{"rule", "trimmed_mean"}, {"trim_beta", 0.2}}}) {
    CAPTURE(config.dump());
    auto read = make(config, UpdateShape{n, n - 17});
    auto dense = make(config, UpdateShape{n, n - 17});
    for (size_t u = 0; u < updates.size(); ++u) {
      const VectorReader reader(updates[u]);
      REQUIRE(read->add(reader.values(), n, 1.0 + double(u), 1.0).ok());
      CHECK(reader.reads() > 1);  // a piece at a time
      REQUIRE(dense->add(updates[u].data(), n, 1.0 + double(u)).ok());
    }
    CHECK(*read->result() == *dense->result());
  }
}

TEST_CASE("a failed read refuses the update; one that cuts a fedavg fold short spoils the sum") {
  const size_t n = 4 * kDecodePiece;
  const auto updates = random_updates(2, n, 12);
  // Before anything is kept (clipping reads the update once before its fold, a buffered rule
  // copies it before keeping it): refused, nothing changed.
  for (const nlohmann::json& config : {nlohmann::json{{"rule", "fedavg"}, {"clip_norm", 2.0}},
                                       nlohmann::json{{"rule", "median"}}}) {
    CAPTURE(config.dump());
    auto agg = make(config, n);
    auto alone = make(config, n);
    const VectorReader failing(updates[0], n / 2);
    CHECK(agg->add(failing.values(), n, 1.0, 1.0).code() == Code::kInternal);
    CHECK(agg->updates() == 0);
    REQUIRE(agg->add(updates[1].data(), n, 1.0).ok());
    REQUIRE(alone->add(updates[1].data(), n, 1.0).ok());
    CHECK(*agg->result() == *alone->result());
  }
  // During a fold: the sum holds part of the update, so the aggregate takes nothing more and
  // gives nothing out.
  auto agg = make({{"rule", "fedavg"}}, n);
  REQUIRE(agg->add(updates[1].data(), n, 1.0).ok());
  const VectorReader failing(updates[0], n / 2);
  CHECK(agg->add(failing.values(), n, 1.0, 1.0).code() == Code::kInternal);
  CHECK(agg->result().status().code() == Code::kInternal);
  CHECK(agg->partial().status().code() == Code::kInternal);
  CHECK(agg->add(updates[1].data(), n, 1.0).code() == Code::kInternal);
}

TEST_CASE("a discount shrinks an update's part of the mean, not its weight (FedBuff)") {
  const std::vector<float> stale = {2, 2}, fresh = {4, 4};
  auto fedavg = make({{"rule", "fedavg"}}, 2);
  REQUIRE(fedavg->add(stale.data(), 2, 1, 0.5).ok());
  REQUIRE(fedavg->add(fresh.data(), 2, 3, 1.0).ok());
  auto mean = *fedavg->result();  // (1 x 0.5 x 2 + 3 x 1 x 4) / (1 + 3)
  CHECK(mean[0] == doctest::Approx(3.25));
  CHECK(mean[1] == doctest::Approx(3.25));
  // Clipping comes first: the discount scales the clipped update.
  auto clipped = make({{"rule", "fedavg"}, {"clip_norm", 1.0}}, 2);
  const std::vector<float> long_update = {3, 4};
  REQUIRE(clipped->add(long_update.data(), 2, 1, 0.5).ok());
  CHECK((*clipped->result())[0] == doctest::Approx(0.3));
  for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    CAPTURE(bad);
    CHECK(fedavg->add(fresh.data(), 2, 1, bad).code() == Code::kInvalidArgument);
  }
  auto median = make({{"rule", "median"}}, 2);
  CHECK(median->add(fresh.data(), 2, 1, 0.5).code() == Code::kInvalidArgument);
  CHECK(median->add(fresh.data(), 2, 1, 1.0).ok());
}

TEST_CASE("buffered rules refuse updates beyond max_buffered_updates") {
  auto agg = make({{"rule", "median"}, {"max_buffered_updates", 3}}, 2);
  std::vector<float> x{1, 2};
  for (int i = 0; i < 3; ++i) REQUIRE(agg->add(x.data(), 2, 1).ok());
  Status full = agg->add(x.data(), 2, 1);
  CHECK(full.code() == Code::kResourceExhausted);
  CHECK(full.message().find("max_buffered_updates") != std::string::npos);
  CHECK(agg->updates() == 3);
  CHECK(agg->result().ok());
}

namespace {

// The files this process holds open in `dir` (a file with no name shows as "dir/#123 (deleted)").
size_t files_open_in(const std::filesystem::path& dir) {
  size_t n = 0;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(fd.path(), error).string();
    if (!error && target.rfind(dir.string() + "/", 0) == 0) ++n;
  }
  return n;
}

// The mappings of files in `dir` this process holds.
size_t files_mapped_in(const std::filesystem::path& dir) {
  std::ifstream maps("/proc/self/maps");
  size_t n = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find(" " + dir.string() + "/") != std::string::npos) ++n;
  }
  return n;
}

// This process's anonymous resident memory (the heap's), in bytes.
uint64_t anonymous_rss() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8)) * 1024;
  }
  return 0;
}

}  // namespace

TEST_CASE("buffered rules keep their copies of the updates in files, not on the heap") {
  fedcase::testing::TempDir dir;
  AggregatorConfig config;
  config.rule = "median";
  config.buffer_dir = dir.path().string();
  constexpr size_t kValues = 1 << 20;  // 4 MiB an update
  auto agg = make_aggregator(config, kValues);
  REQUIRE(agg.ok());
  std::vector<float> update(kValues);
  const uint64_t heap_before = anonymous_rss();
  for (int i = 0; i < 8; ++i) {
    std::fill(update.begin(), update.end(), float(i));
    REQUIRE((*agg)->add(update.data(), kValues, 1).ok());
  }
  const uint64_t heap_after = anonymous_rss();
  const uint64_t heap_growth = heap_after > heap_before ? heap_after - heap_before : 0;
  CHECK(files_mapped_in(dir.path()) == 8);
  CHECK(files_open_in(dir.path()) == 0);  // no descriptor kept per update
  MESSAGE("heap growth for 8 buffered updates of 4 MiB: " << heap_growth / 1024 << " KiB");
  CHECK(heap_growth < 8 << 20);  // on the heap they were 32 MiB
  auto median = (*agg)->result();
  REQUIRE(median.ok());
  CHECK((*median)[0] == 3.5f);
  CHECK((*median)[kValues - 1] == 3.5f);
  agg->reset();
  CHECK(files_mapped_in(dir.path()) == 0);  // gone with the aggregate
  // A folder it cannot write in: the update is refused and nothing is held.
  config.buffer_dir = dir.file("missing");
  auto nowhere = make_aggregator(config, 4);
  REQUIRE(nowhere.ok());
  std::vector<float> small{1, 2, 3, 4};
  const Status refused = (*nowhere)->add(small.data(), 4, 1);
  CHECK(refused.code() == Code::kResourceExhausted);
  CHECK(refused.message().find(dir.file("missing")) != std::string::npos);
  CHECK((*nowhere)->updates() == 0);
}

TEST_CASE("aggregators refuse bad updates without changing the aggregate") {
  for (std::string rule : {"fedavg", "median"}) {
    CAPTURE(rule);
    auto agg = make({{"rule", rule}, {"clip_norm", 1.0}}, 2);
    std::vector<float> good{1, 1}, wrong{1, 1, 1}, nan{1, std::nanf("")};
    CHECK(agg->result().status().code() == Code::kConflict);
    CHECK(agg->add(wrong.data(), 3, 1).code() == Code::kUnprocessable);
    CHECK(agg->add(good.data(), 2, 0).code() == Code::kInvalidArgument);
    CHECK(agg->add(nan.data(), 2, 1).code() == Code::kUnprocessable);
    CHECK(agg->updates() == 0);
  }
  auto krum = make({{"rule", "krum"}, {"byzantine_f", 1}}, 2);
  add_all(*krum, {{1, 1}, {2, 2}, {3, 3}, {4, 4}});
  CHECK(krum->result().status().code() == Code::kConflict);  // needs 2f + 3 = 5
}

TEST_CASE("central DP: clipped equal-weight mean plus seeded Gaussian noise of std z*C/n") {
  const size_t params = 200000;
  const double z = 1.5, clip = 2.0;
  std::vector<float> zero(params, 0.0f);
  nlohmann::json config = {
      {"rule", "fedavg"}, {"clip_norm", clip}, {"dp_noise_multiplier", z}, {"dp_seed", 42}};
  auto one_update = [&](nlohmann::json c, size_t n) {
    auto agg = make(c, params);
    for (size_t i = 0; i < n; ++i) REQUIRE(agg->add(zero.data(), params, 1).ok());
    return *agg->result();
  };
  const auto noise = one_update(config, 4);
  double sum = 0, sum_sq = 0;
  for (float v : noise) {
    sum += v;
    sum_sq += double{v} * v;
  }
  const double mean = sum / params, stddev = std::sqrt(sum_sq / params - mean * mean);
  const double expected = z * clip / 4;
  CHECK(std::fabs(mean) < 5 * expected / std::sqrt(double(params)));
  CHECK(stddev == doctest::Approx(expected).epsilon(0.01));

  CHECK(one_update(config, 4) == noise);  // same seed, same noise
  nlohmann::json threads1 = config;
  threads1["threads"] = 1;
  CHECK(one_update(threads1, 4) == noise);  // independent of the thread count
  nlohmann::json other = config;
  other["dp_seed"] = 43;
  CHECK(one_update(other, 4) != noise);

  // Client weights are ignored under DP: the mean is unweighted.
  auto agg = make(
      {{"rule", "fedavg"}, {"clip_norm", 10.0}, {"dp_noise_multiplier", 1e-9}, {"dp_seed", 1}}, 1);
  std::vector<float> a{1}, b{3};
  REQUIRE(agg->add(a.data(), 1, 1).ok());
  REQUIRE(agg->add(b.data(), 1, 1000).ok());
  CHECK((*agg->result())[0] == doctest::Approx(2.0));
}

TEST_CASE("a sum its senders weighted (secure aggregation) counts as those updates did") {
  const auto updates = random_updates(3, 257, 11);
  const std::vector<double> weights = {1, 2, 3};
  auto separate = make({{"rule", "fedavg"}}, 257);
  std::vector<float> sum(257, 0);
  for (size_t i = 0; i < 3; ++i) {
    REQUIRE(separate->add(updates[i].data(), 257, weights[i]).ok());
    for (size_t k = 0; k < 257; ++k) sum[k] += float(weights[i]) * updates[i][k];
  }
  auto summed = make({{"rule", "fedavg"}}, 257);
  REQUIRE(summed->add_sum(sum.data(), sum.size(), 6, 3).ok());
  CHECK(summed->updates() == 3);
  auto a = separate->result();
  auto b = summed->result();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  for (size_t k = 0; k < 257; ++k) CHECK((*a)[k] == doctest::Approx((*b)[k]).epsilon(1e-5));
  CHECK_FALSE(summed->add_sum(sum.data(), 256, 6, 3).ok());  // wrong length
  CHECK_FALSE(summed->add_sum(sum.data(), 257, 0, 3).ok());  // no weight
  // With DP each update counts once; rules that need each update refuse a sum.
  auto dp = make({{"rule", "fedavg"}, {"clip_norm", 1}, {"dp_noise_multiplier", 1}}, 257);
  CHECK_FALSE(dp->add_sum(sum.data(), 257, 6, 3).ok());
  CHECK(dp->add_sum(sum.data(), 257, 3, 3).ok());
  auto median = make({{"rule", "median"}}, 257);
  CHECK(median->add_sum(sum.data(), 257, 3, 3).code() == Code::kInvalidArgument);
}
