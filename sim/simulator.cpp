#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "aggregation/server_optimizer.h"
#include "client_sdk/importance_sampler.h"
#include "client_sdk/round_order.h"
#include "client_sdk/sample_cache.h"
#include "common/blob.h"
#include "ml/model.h"
#include "scheduling/profile.h"
#include "scheduling/selection.h"
#include "sim/random.h"

namespace fedcase::sim {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Virtual time t is t + kClockOrigin on the coordinator's clock: profiles ignore contacts at
// times <= 0, and the fleet is online from virtual time 0.
constexpr double kClockOrigin = 86400;

// The device side of one client: its sampler weights and its cache persist across rounds.
struct Device {
  explicit Device(client::ImportanceSampler s) : sampler(std::move(s)) {}
  client::ImportanceSampler sampler;
  std::unique_ptr<client::SampleCache> cache;
};

// One online participant's task, with its reads already looked up in its cache.
struct Attempt {
  size_t task = 0;    // index into the round plan
  size_t client = 0;  // index into the fleet
  std::vector<size_t> order;  // local sample ids, in training order
  scheduling::RoundReport report;
  double duration_s = 0;
};

double seconds_to_send(uint64_t bytes, double kbps) { return double(bytes) * 8.0 / (kbps * 1e3); }

}  // namespace

struct Simulator::State {
  State(SimConfig c, const ml::Dataset& tr, const ml::Dataset& te, std::vector<SimClient> f,
        ml::Model m)
      : config(std::move(c)), train(tr), test(te), fleet(std::move(f)), model(std::move(m)),
        jitter(config.seed * 0x2545F4914F6CDD1Dull + 7) {}

  SimConfig config;
  const ml::Dataset& train;
  const ml::Dataset& test;
  std::vector<SimClient> fleet;
  std::vector<scheduling::ClientProfile> profiles;
  std::vector<Device> devices;
  std::unique_ptr<scheduling::SelectionPolicy> policy;
  std::unique_ptr<aggregation::ServerOptimizer> optimizer;
  ml::Model model;
  std::vector<float> global;
  uint64_t model_bytes = 0;
  double now = 0;
  double heard_until = -1;  // contacts are emulated up to here
  RoundIndex round = 0;
  ml::EvalResult last_eval;
  Rng jitter;

  // Every online client contacts the coordinator at each multiple of heartbeat_s up to `t`.
  void hear_until(double t);
  size_t available_count() const;
  // The round's read order of a task (SHADE draws or uniform passes, then cache reuse).
  Result<std::vector<size_t>> plan_reads(Device& device, const scheduling::ClientTask& task) const;
  // Gives `device` a cache of the task's policy and budget (kept while they do not change).
  Status prepare_cache(Device& device, const SimClient& client,
                       const scheduling::CacheDirectives& directives) const;
  // Looks the reads up in the cache and models the task's duration.
  Status attempt(Attempt& a, const scheduling::ClientTask& task);
  // Trains the global model on the attempt's samples and adds the delta to `aggregate`.
  Status train_and_add(Attempt& a, const scheduling::ClientTask& task,
                       aggregation::Aggregator& aggregate);
};

void Simulator::State::hear_until(double t) {
  const double step = config.heartbeat_s;
  for (double at = (std::floor(heard_until / step) + 1) * step; at <= t; at += step) {
    for (size_t i = 0; i < fleet.size(); ++i) {
      if (fleet[i].spells.online_at(at)) scheduling::observe_heartbeat(profiles[i], at + kClockOrigin);
    }
    heard_until = at;
  }
}

size_t Simulator::State::available_count() const {
  size_t n = 0;
  for (const auto& p : profiles) n += scheduling::is_online(p, now + kClockOrigin);
  return n;
}

Result<std::vector<size_t>> Simulator::State::plan_reads(
    Device& d, const scheduling::ClientTask& task) const {
  auto sampling = client::parse_sampling(task.sampling);
  if (!sampling.ok()) return sampling.status();
  return client::plan_round_order(d.sampler, *sampling, task.samples, d.cache.get(),
                                  task.cache.repetition_factor);
}

Status Simulator::State::prepare_cache(Device& d, const SimClient& c,
                                       const scheduling::CacheDirectives& directives) const {
  auto policy = client::parse_cache_policy(directives.policy);
  if (!policy.ok()) return policy.status();
  // Records are one-byte stand-ins: the budget is counted in samples of the client's size.
  const uint64_t budget = std::min(directives.budget_bytes, c.device.cache_bytes);
  const uint64_t slots = budget / std::max<uint64_t>(1, c.device.sample_bytes);
  if (d.cache && d.cache->policy() == *policy && d.cache->budget_bytes() == slots) {
    return ok_status();
  }
  d.cache = client::make_cache(*policy, slots, d.sampler.size());
  for (size_t id = 0; id < d.sampler.size(); ++id) d.cache->set_importance(id, d.sampler.weight(id));
  return ok_status();
}

Status Simulator::State::attempt(Attempt& a, const scheduling::ClientTask& task) {
  Device& d = devices[a.client];
  const DeviceRow& dev = fleet[a.client].device;
  FEDCASE_RETURN_IF_ERROR(prepare_cache(d, fleet[a.client], task.cache));
  auto order = plan_reads(d, task);
  if (!order.ok()) return order.status();
  a.order = std::move(order).value();
  const client::CacheStats before = d.cache->stats();
  for (size_t id : a.order) {
    if (!d.cache->lookup(id)) d.cache->offer(id, std::string(1, '\0'));
  }
  scheduling::RoundReport& r = a.report;
  r.round = round;
  r.samples = a.order.size();
  r.cache_hits = d.cache->stats().hits - before.hits;
  r.cache_misses = d.cache->stats().misses - before.misses;
  r.sample_bytes = double(dev.sample_bytes);
  const double noise = lognormal(jitter, 1.0, config.duration_sigma);
  r.compute_s = noise * double(r.samples) * dev.compute_ms_per_sample / 1e3;
  r.io_s = noise * double(r.cache_misses * dev.sample_bytes) / (dev.storage_mb_per_s * 1e6);
  r.download_bytes = r.upload_bytes = model_bytes;
  r.download_s = noise * seconds_to_send(model_bytes, dev.download_kbps);
  r.upload_s = noise * seconds_to_send(model_bytes, dev.upload_kbps);
  a.duration_s = r.compute_s + r.io_s + r.download_s + r.upload_s;
  return ok_status();
}

Status Simulator::State::train_and_add(Attempt& a, const scheduling::ClientTask& task,
                                       aggregation::Aggregator& aggregate) {
  Device& d = devices[a.client];
  const SimClient& c = fleet[a.client];
  FEDCASE_RETURN_IF_ERROR(model.set_parameters(global));
  std::vector<size_t> samples(a.order.size());
  for (size_t k = 0; k < a.order.size(); ++k) samples[k] = c.samples[a.order[k]];
  ml::TrainOptions options;
  options.batch_size = task.batch_size;
  options.lr = task.learning_rate;
  options.momentum = task.momentum;
  options.prox_mu = task.prox_mu;
  size_t position = 0;
  std::vector<size_t> ids;
  auto observer = [&](const std::vector<size_t>& batch, const std::vector<float>& losses) {
    ids.assign(a.order.begin() + position, a.order.begin() + position + batch.size());
    d.sampler.observe_batch(ids, losses);
    for (size_t id : ids) d.cache->set_importance(id, d.sampler.weight(id));
    position += batch.size();
  };
  const ml::TrainStats trained = model.train(train, samples, options, observer);
  d.sampler.end_round(trained.samples ? trained.loss_sum / double(trained.samples) : kNaN);
  a.report.loss_sum = trained.loss_sum;
  a.report.loss_sq_sum = trained.loss_sq_sum;

  std::vector<float> delta = model.parameters();
  for (size_t k = 0; k < delta.size(); ++k) delta[k] -= global[k];
  return aggregate.add(delta.data(), delta.size(), double(trained.samples));
}

Result<std::unique_ptr<Simulator>> Simulator::create(const SimConfig& config,
                                                     const ml::Dataset& train,
                                                     const ml::Dataset& test,
                                                     std::vector<SimClient> fleet) {
  for (const SimClient& c : fleet) {
    if (c.samples.empty()) return invalid_argument("client " + std::to_string(c.id) + " has no data");
    for (size_t s : c.samples) {
      if (s >= train.size()) return invalid_argument("fleet sample outside the training set");
    }
  }
  auto model = ml::Model::create(config.model, config.seed);
  if (!model.ok()) return model.status();
  auto policy = scheduling::make_selection_policy(config.selection, config.seed);
  if (!policy.ok()) return policy.status();
  auto optimizer = aggregation::make_server_optimizer(config.server_optimizer);
  if (!optimizer.ok()) return optimizer.status();

  auto s = std::make_unique<State>(config, train, test, std::move(fleet), std::move(model).value());
  s->policy = std::move(policy).value();
  s->optimizer = std::move(optimizer).value();
  s->global = s->model.parameters();
  s->model_bytes = encode_blob(ModelBlob{0, s->model.layout(), s->global}).size();
  s->profiles.resize(s->fleet.size());
  s->devices.reserve(s->fleet.size());
  for (size_t i = 0; i < s->fleet.size(); ++i) {
    const SimClient& c = s->fleet[i];
    scheduling::ClientProfile& p = s->profiles[i];
    p.id = c.id;
    const DeviceRow& d = c.device;
    FEDCASE_RETURN_IF_ERROR(scheduling::observe_registration(
        p, {c.samples.size(), d.cache_bytes, double(d.sample_bytes), d.compute_ms_per_sample,
            d.storage_mb_per_s * 1e6}));
    client::SamplerOptions sampler;
    sampler.seed = config.seed * 1000003 + c.id;
    sampler.frequency_order_period = config.frequency_order_period;
    s->devices.emplace_back(client::ImportanceSampler(c.samples.size(), sampler));
  }
  s->last_eval = s->model.evaluate(test, config.eval_samples);
  return std::unique_ptr<Simulator>(new Simulator(std::move(s)));
}

Simulator::Simulator(std::unique_ptr<State> state) : state_(std::move(state)) {}
Simulator::~Simulator() = default;

double Simulator::now_s() const { return state_->now; }
RoundIndex Simulator::rounds() const { return state_->round; }
const std::vector<SimClient>& Simulator::fleet() const { return state_->fleet; }
std::string Simulator::policy() const { return state_->policy->name(); }

Result<RoundRecord> Simulator::run_round() {
  State& s = *state_;
  const SimConfig& cfg = s.config;
  // Open when enough clients are available, as the coordinator's driver does.
  for (s.hear_until(s.now); s.available_count() < std::max<size_t>(1, cfg.min_clients);
       s.hear_until(s.now)) {
    s.now += cfg.idle_wait_s;
    if (s.now > cfg.max_virtual_s) return resource_exhausted("too few clients available");
  }
  RoundRecord rec;
  rec.round = ++s.round;
  rec.open_s = s.now;

  std::vector<scheduling::Candidate> candidates;
  candidates.reserve(s.fleet.size());
  std::vector<size_t> index_of(s.fleet.size() + 1);
  for (size_t i = 0; i < s.fleet.size(); ++i) {
    const bool available = scheduling::is_online(s.profiles[i], s.now + kClockOrigin);
    rec.available += available;
    candidates.push_back(scheduling::make_candidate(s.profiles[i], available, cfg.training, s.model_bytes));
    index_of[s.fleet[i].id] = i;
  }
  const std::vector<ClientId> selected =
      s.policy->select({rec.round, cfg.clients_per_round, cfg.overcommit}, candidates);
  if (selected.empty()) return internal_error("the selection policy invited nobody");
  std::vector<const scheduling::ClientProfile*> invited;
  for (ClientId id : selected) {
    scheduling::observe_selected(s.profiles[index_of[id]], rec.round);
    invited.push_back(&s.profiles[index_of[id]]);
  }
  auto plan = scheduling::plan_round(cfg.training, invited, s.model_bytes);
  if (!plan.ok()) return plan.status();
  rec.deadline_s = plan->deadline_s;
  rec.invited = plan->tasks.size();

  // Every online invitee reads its samples; those that stay online and beat the deadline
  // finish, in order of their modelled durations.
  std::vector<Attempt> finishers;
  for (size_t t = 0; t < plan->tasks.size(); ++t) {
    const size_t i = index_of[plan->tasks[t].client];
    TaskTrace trace;
    trace.client = s.fleet[i].id;
    trace.online_at_open = s.fleet[i].spells.online_at(s.now);
    if (trace.online_at_open) {
      Attempt a;
      a.task = t;
      a.client = i;
      FEDCASE_RETURN_IF_ERROR(s.attempt(a, plan->tasks[t]));
      trace.duration_s = a.duration_s;
      trace.cache_hits = a.report.cache_hits;
      trace.cache_misses = a.report.cache_misses;
      trace.finished = a.duration_s <= plan->deadline_s &&
                       s.fleet[i].spells.online_until(s.now) >= s.now + a.duration_s;
      if (trace.finished) finishers.push_back(std::move(a));
    }
    rec.tasks.push_back(trace);
  }
  std::stable_sort(finishers.begin(), finishers.end(),
                   [](const Attempt& a, const Attempt& b) { return a.duration_s < b.duration_s; });
  const bool filled = finishers.size() >= cfg.clients_per_round;
  if (filled) finishers.resize(cfg.clients_per_round);
  const double round_s = filled ? finishers.back().duration_s : plan->deadline_s;

  // The kept updates train for real and are aggregated; their reports update the profiles.
  aggregation::AggregatorConfig aggregation = cfg.aggregation;
  if (aggregation.dp_noise_multiplier > 0) aggregation.dp_seed = cfg.seed * 1000003 + rec.round;
  auto aggregate = aggregation::make_aggregator(aggregation, s.global.size());
  if (!aggregate.ok()) return aggregate.status();
  uint64_t samples = 0;
  double loss_sum = 0, hit_ratio_sum = 0;
  std::vector<double> kept_duration(plan->tasks.size(), -1);
  for (Attempt& a : finishers) {
    FEDCASE_RETURN_IF_ERROR(s.train_and_add(a, plan->tasks[a.task], **aggregate));
    scheduling::ClientProfile& p = s.profiles[a.client];
    FEDCASE_RETURN_IF_ERROR(scheduling::observe_completion(p, a.report));
    scheduling::observe_heartbeat(p, s.now + a.duration_s + kClockOrigin);
    samples += a.report.samples;
    loss_sum += a.report.loss_sum;
    const uint64_t reads = a.report.cache_hits + a.report.cache_misses;
    hit_ratio_sum += reads ? double(a.report.cache_hits) / double(reads) : 0;
    kept_duration[a.task] = a.duration_s;
    rec.tasks[a.task].kept = true;
  }
  rec.participants = finishers.size();
  rec.train_loss = samples ? loss_sum / double(samples) : kNaN;
  rec.hit_ratio = finishers.empty() ? 0 : hit_ratio_sum / double(finishers.size());
  for (const TaskTrace& t : rec.tasks) rec.dropped += !t.finished;

  // Close: the policy learns what happened, as in the coordinator's conclude_round.
  scheduling::RoundOutcome outcome;
  outcome.round = rec.round;
  outcome.duration_s = round_s;
  outcome.loss = rec.train_loss;
  for (size_t t = 0; t < plan->tasks.size(); ++t) {
    const size_t i = index_of[plan->tasks[t].client];
    scheduling::ClientOutcome client{s.fleet[i].id, kept_duration[t] >= 0, 0, 0};
    if (client.finished) {
      client.duration_s = kept_duration[t];
      client.utility = s.profiles[i].utility;
    } else if (!filled) {
      scheduling::observe_missed_deadline(s.profiles[i]);
    }
    outcome.clients.push_back(client);
  }
  s.policy->on_round_end(outcome);

  rec.committed = finishers.size() >= cfg.min_updates;
  if (rec.committed) {
    auto mean = (*aggregate)->result();
    if (!mean.ok()) return mean.status();
    FEDCASE_RETURN_IF_ERROR(s.optimizer->step(s.global, *mean));
    FEDCASE_RETURN_IF_ERROR(s.model.set_parameters(s.global));
    s.last_eval = s.model.evaluate(s.test, cfg.eval_samples);
  }
  rec.accuracy = s.last_eval.accuracy;
  rec.loss = s.last_eval.loss;
  s.now += round_s;
  rec.close_s = s.now;
  return rec;
}

}  // namespace fedcase::sim
