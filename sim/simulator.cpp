#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "client_sdk/importance_sampler.h"
#include "client_sdk/round_order.h"
#include "client_sdk/sample_cache.h"
#include "client_sdk/update_encoding.h"
#include "common/blob.h"
#include "ml/model.h"
#include "rounds/job_runtime.h"
#include "scheduling/pace.h"
#include "scheduling/profile.h"
#include "scheduling/selection.h"
#include "sim/random.h"

namespace fedcase::sim {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Virtual time t is t + kClockOrigin on the coordinator's clock: profiles ignore contacts at
// times <= 0, and the fleet is online from virtual time 0.
constexpr double kClockOrigin = 86400;
constexpr JobId kSimulatedJob = 1;  // the one job a simulation runs

// The device side of one client: its sampler weights and its cache persist across rounds.
struct Device {
  explicit Device(client::ImportanceSampler s, uint64_t seed)
      : sampler(std::move(s)), encoder(seed) {}
  client::ImportanceSampler sampler;
  std::unique_ptr<client::SampleCache> cache;
  client::UpdateEncoder encoder;  // compresses its updates as the job asks, as the SDK does
};

// One online participant's task, with its reads already looked up in its cache.
struct Attempt {
  size_t task = 0;            // index into the round's tasks
  size_t client = 0;          // index into the fleet
  std::vector<size_t> order;  // local sample ids, in training order
  scheduling::RoundReport report;
  double duration_s = 0;
};

// An asynchronous task in flight (virtual times).
struct Flight {
  Attempt attempt;
  scheduling::ClientTask task;
  double start = 0;
  double finish = 0;       // when its update arrives, if `reports`
  double offline_at = 0;   // when its client goes offline
  bool reports = false;    // its client stays online until it finishes
};

double seconds_to_send(uint64_t bytes, double kbps) { return double(bytes) * 8.0 / (kbps * 1e3); }

}  // namespace

struct Simulator::State {
  State(SimConfig c, const ml::Dataset& tr, const ml::Dataset& te, std::vector<SimClient> f,
        ml::Model m)
      : config(std::move(c)),
        train(tr),
        test(te),
        fleet(std::move(f)),
        model(std::move(m)),
        jitter(config.job.seed * 0x2545F4914F6CDD1Dull + 7),
        pacing(config.job.seed * 0x9E3779B97F4A7C15ull + 11) {}

  SimConfig config;
  const ml::Dataset& train;
  const ml::Dataset& test;
  std::vector<SimClient> fleet;
  std::vector<scheduling::ClientProfile> profiles;
  std::vector<Device> devices;
  std::map<ClientId, size_t> index_of;  // fleet position of each client id
  std::unique_ptr<rounds::JobRuntime> job;
  ml::Model model;
  double now = 0;
  double heard_until = -1;  // contacts are emulated up to here
  ml::EvalResult last_eval;
  Rng jitter;
  // A steered fleet (config.pace): each client's next check-in (virtual time), its draws.
  std::vector<double> next_check_in;
  Rng pacing;
  UpdateObserver on_update;
  // Asynchronous jobs: the open buffer, the tasks in flight by client, and the model versions
  // they train from.
  std::optional<rounds::Round> buffer;
  std::map<ClientId, Flight> flights;
  std::map<uint64_t, std::shared_ptr<const rounds::GlobalModel>> versions;

  // The fleet's contacts up to `t`: every online client at each multiple of heartbeat_s, or
  // with config.pace, the check-ins of a steered fleet (check_in_until).
  void hear_until(double t);
  // Each client checks in at its next check-in up to `t` (when online, else once it is back),
  // is available for pace.awake_s, and is then told to sleep until a point of its window.
  void check_in_until(double t);
  // The steered fleet's period for the job's rounds (scheduling::check_in_period).
  double check_in_period() const;
  // Opens the job's next round at the current time, or nullopt when the engine declines.
  Result<std::optional<rounds::Round>> try_open();
  Status apply(const std::vector<rounds::ProfileChange>& changes);
  // The round's read order of a task (SHADE draws or uniform passes, then cache reuse).
  std::vector<size_t> plan_reads(Device& device, const scheduling::ClientTask& task) const;
  // Gives `device` a cache of the task's policy and budget (kept while they do not change).
  void prepare_cache(Device& device, const SimClient& client,
                     const protocol::CacheDirectives& directives) const;
  // Looks the reads up in the cache and models the task's duration.
  Status attempt(Attempt& a, const scheduling::ClientTask& task);
  // Trains `global` (the version the task was handed out on) on the attempt's samples and
  // folds the delta into `aggregate` with `discount`.
  Status train_and_add(Attempt& a, const scheduling::ClientTask& task,
                       const rounds::GlobalModel& global, rounds::RoundAggregate& aggregate,
                       double discount, RoundIndex task_round);
  // Opens the job's next round, waiting idle_wait_s at a time until the engine opens one.
  Result<rounds::Round> open_when_possible();
  // Asynchronous jobs: hands out tasks for the buffer's free slots among the online clients
  // without one, and sets their flights going (recorded in `dispatched`).
  Status refill();
  // Ends the flights of clients that go offline before finishing and hold no task of the
  // buffer any more (dropped): they never report. Returns the client-seconds they spent.
  double end_lost_flights();
  std::vector<TaskTrace> dispatched;  // tasks handed out since the last buffer's record
};

double Simulator::State::end_lost_flights() {
  double spent = 0;
  for (auto it = flights.begin(); it != flights.end();) {
    const Flight& f = it->second;
    if (!f.reports && (!buffer || buffer->task_for(it->first) == nullptr)) {
      spent += std::max(0.0, f.offline_at - f.start);
      it = flights.erase(it);
    } else {
      ++it;
    }
  }
  return spent;
}

Result<rounds::Round> Simulator::State::open_when_possible() {
  while (true) {
    auto tried = try_open();
    if (!tried.ok()) return tried.status();
    if (*tried) return std::move(**tried);
    now += config.idle_wait_s;
    if (now > config.max_virtual_s) return resource_exhausted("too few clients available");
  }
}

Status Simulator::State::refill() {
  rounds::Round& b = *buffer;
  const size_t free = job->free_slots(b);
  if (free == 0) return ok_status();
  hear_until(now);
  std::vector<rounds::PoolClient> pool;
  pool.reserve(profiles.size());
  for (const auto& p : profiles) {
    pool.push_back({&p, scheduling::is_online(p, now + kClockOrigin) && !flights.count(p.id)});
  }
  std::set<ClientId> excluded;
  for (const auto& task : b.tasks()) excluded.insert(task.client);
  auto planned = job->plan_slots(b.index(), free, excluded, pool, now + kClockOrigin);
  if (!planned.ok()) return planned.status();
  for (rounds::Round::Assignment& a : *planned) {
    const ClientId id = a.task.client;
    b.assign(a.task, a.terms);
    b.hand_out(id, now + kClockOrigin);
    const size_t i = index_of.at(id);
    FEDCASE_RETURN_IF_ERROR(rounds::apply_profile_change(
        {rounds::ProfileChange::Kind::kSelected, id, b.index(), {}, {}}, profiles[i], {}));
    Flight f;
    f.task = std::move(a.task);
    f.attempt.client = i;
    FEDCASE_RETURN_IF_ERROR(attempt(f.attempt, f.task));
    f.start = now;
    f.finish = now + f.attempt.duration_s;
    f.offline_at = fleet[i].spells.online_until(now);
    f.reports = f.offline_at >= f.finish;
    versions[b.base_version()] = job->model();
    TaskTrace trace;
    trace.client = id;
    trace.start_s = now;
    trace.online_at_open = true;
    trace.duration_s = f.attempt.duration_s;
    trace.cache_hits = f.attempt.report.cache_hits;
    trace.cache_misses = f.attempt.report.cache_misses;
    trace.bytes = f.attempt.report.download_bytes + f.attempt.report.upload_bytes;
    dispatched.push_back(trace);
    flights.emplace(id, std::move(f));
  }
  return ok_status();
}

double Simulator::State::check_in_period() const {
  const SimPace& pace = *config.pace;
  const rounds::JobConfig& j = job->config();
  const double wanted =
      pace.rule.pool_factor * double(scheduling::invited_count(j.clients_per_round, j.overcommit));
  return scheduling::check_in_period(pace.rule, fleet.size(), wanted, pace.awake_s);
}

void Simulator::State::check_in_until(double t) {
  const SimPace& pace = *config.pace;
  const double period = check_in_period();
  std::vector<double> utilities;
  for (const auto& p : profiles) {
    if (p.utility_round > 0) utilities.push_back(p.utility);
  }
  std::sort(utilities.begin(), utilities.end());
  for (size_t i = 0; i < fleet.size(); ++i) {
    scheduling::ClientProfile& profile = profiles[i];
    for (double& next = next_check_in[i]; next <= t;) {
      const double at = fleet[i].spells.online_from(next);
      if (at > t) {
        next = at;
        break;
      }
      scheduling::observe_heartbeat(profile, at + kClockOrigin);
      const double asleep_at = at + pace.awake_s;
      if (asleep_at > t) {  // checked in now: available
        next = at;
        break;
      }
      const double value =
          profile.utility_round > 0 ? scheduling::rank_among(utilities, profile.utility) : 0.5;
      const scheduling::CheckInWindow w = scheduling::check_in_window(pace.rule, period, value);
      scheduling::observe_steered(profile, asleep_at + kClockOrigin,
                                  asleep_at + w.latest_s + kClockOrigin);
      next = asleep_at + w.earliest_s + pacing.unit() * (w.latest_s - w.earliest_s);
    }
  }
}

void Simulator::State::hear_until(double t) {
  if (config.pace) return check_in_until(t);
  const double step = config.heartbeat_s;
  for (double at = (std::floor(heard_until / step) + 1) * step; at <= t; at += step) {
    for (size_t i = 0; i < fleet.size(); ++i) {
      if (fleet[i].spells.online_at(at))
        scheduling::observe_heartbeat(profiles[i], at + kClockOrigin);
    }
    heard_until = at;
  }
}

Result<std::optional<rounds::Round>> Simulator::State::try_open() {
  hear_until(now);
  std::vector<rounds::PoolClient> pool;
  pool.reserve(profiles.size());
  for (const auto& p : profiles) pool.push_back({&p, scheduling::is_online(p, now + kClockOrigin)});
  return job->open_round(pool, now + kClockOrigin);
}

Status Simulator::State::apply(const std::vector<rounds::ProfileChange>& changes) {
  for (const auto& change : changes) {
    FEDCASE_RETURN_IF_ERROR(
        rounds::apply_profile_change(change, profiles[index_of.at(change.client)], {}));
  }
  return ok_status();
}

std::vector<size_t> Simulator::State::plan_reads(Device& d,
                                                 const scheduling::ClientTask& task) const {
  return client::plan_round_order(
      d.sampler, task.sampling, task.samples, d.cache.get(),
      {task.cache.repetition, task.cache.repetition_factor, task.batch_size});
}

void Simulator::State::prepare_cache(Device& d, const SimClient& c,
                                     const protocol::CacheDirectives& directives) const {
  const protocol::CachePolicy policy = directives.policy;
  // Records are one-byte stand-ins: the budget is counted in samples of the client's size.
  const uint64_t budget = std::min(directives.budget_bytes, c.device.cache_bytes);
  const uint64_t slots = budget / std::max<uint64_t>(1, c.device.sample_bytes);
  if (d.cache && d.cache->policy() == policy && d.cache->budget_bytes() == slots) return;
  d.cache = client::make_cache(policy, slots, d.sampler.size());
  for (size_t id = 0; id < d.sampler.size(); ++id)
    d.cache->set_importance(id, d.sampler.weight(id));
}

Status Simulator::State::attempt(Attempt& a, const scheduling::ClientTask& task) {
  Device& d = devices[a.client];
  const DeviceRow& dev = fleet[a.client].device;
  prepare_cache(d, fleet[a.client], task.cache);
  a.order = plan_reads(d, task);
  const client::CacheStats before = d.cache->stats();
  for (size_t id : a.order) {
    if (!d.cache->lookup(id)) d.cache->offer(id, std::string(1, '\0'));
  }
  scheduling::RoundReport& r = a.report;
  r.samples = a.order.size();
  r.cache_hits = d.cache->stats().hits - before.hits;
  r.cache_misses = d.cache->stats().misses - before.misses;
  r.sample_bytes = double(dev.sample_bytes);
  const double noise = lognormal(jitter, 1.0, config.duration_sigma);
  r.compute_s = noise * double(r.samples) * dev.compute_ms_per_sample / 1e3;
  r.io_s = noise * double(r.cache_misses * dev.sample_bytes) / (dev.storage_mb_per_s * 1e6);
  const uint64_t model_bytes = job->model()->blob.size();
  r.download_bytes = model_bytes;
  r.upload_bytes = client::update_body_bytes(job->model()->layout, job->config().compression);
  r.download_s = noise * seconds_to_send(model_bytes, dev.download_kbps);
  r.upload_s = noise * seconds_to_send(r.upload_bytes, dev.upload_kbps);
  a.duration_s = r.compute_s + r.io_s + r.download_s + r.upload_s;
  return ok_status();
}

Status Simulator::State::train_and_add(Attempt& a, const scheduling::ClientTask& task,
                                       const rounds::GlobalModel& base,
                                       rounds::RoundAggregate& aggregate, double discount,
                                       RoundIndex task_round) {
  Device& d = devices[a.client];
  const SimClient& c = fleet[a.client];
  const std::vector<float> global = base.params();
  FEDCASE_RETURN_IF_ERROR(model.set_parameters(global));
  std::vector<size_t> samples(a.order.size());
  for (size_t k = 0; k < a.order.size(); ++k) samples[k] = c.samples[a.order[k]];
  ml::TrainOptions options;
  options.batch_size = task.batch_size;
  options.lr = task.learning_rate;
  options.momentum = task.momentum;
  options.weight_decay = task.weight_decay;
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
  // Sent as the SDK sends it: compressed if the job asks, and folded as the coordinator folds it.
  const std::string body =
      d.encoder.encode(kSimulatedJob, base.version, base.layout, delta,
                       job->config().compression);
  BlobView update;
  FEDCASE_RETURN_IF_ERROR(view_blob(body, body.size(), update));
  FEDCASE_RETURN_IF_ERROR(aggregate.add(update, double(trained.samples), discount));
  if (on_update) on_update({c.id, delta, a.report, now, task_round, base.version});
  return ok_status();
}

Result<std::unique_ptr<Simulator>> Simulator::create(const SimConfig& config,
                                                     const ml::Dataset& train,
                                                     const ml::Dataset& test,
                                                     std::vector<SimClient> fleet) {
  for (const SimClient& c : fleet) {
    if (c.samples.empty())
      return invalid_argument("client " + std::to_string(c.id) + " has no data");
    for (size_t s : c.samples) {
      if (s >= train.size()) return invalid_argument("fleet sample outside the training set");
    }
  }
  auto model = ml::Model::create(config.job.model, config.job.seed);
  if (!model.ok()) return model.status();
  auto initial = rounds::make_global_model(0, model->layout(), model->parameters());
  auto parts = rounds::make_job_parts(config.job);
  if (!parts.ok()) return parts.status();
  auto job =
      rounds::JobRuntime::create(std::move(parts).value(), initial, nlohmann::json::object(), "");
  if (!job.ok()) return job.status();

  auto s = std::make_unique<State>(config, train, test, std::move(fleet), std::move(model).value());
  s->job = std::move(job).value();
  s->profiles.resize(s->fleet.size());
  if (config.pace) {
    // A steered fleet starts at random points of its cycle, as one running for a while.
    const double period = s->check_in_period();
    for (size_t i = 0; i < s->fleet.size(); ++i) {
      s->next_check_in.push_back(s->pacing.unit() * (period + config.pace->awake_s));
    }
  }
  s->devices.reserve(s->fleet.size());
  for (size_t i = 0; i < s->fleet.size(); ++i) {
    const SimClient& c = s->fleet[i];
    if (!s->index_of.emplace(c.id, i).second) {
      return invalid_argument("client id " + std::to_string(c.id) + " appears twice");
    }
    scheduling::ClientProfile& p = s->profiles[i];
    p.id = c.id;
    const DeviceRow& d = c.device;
    FEDCASE_RETURN_IF_ERROR(scheduling::observe_registration(
        p, {c.samples.size(), d.cache_bytes, double(d.sample_bytes), d.compute_ms_per_sample,
            d.storage_mb_per_s * 1e6}));
    client::SamplerOptions sampler;
    sampler.seed = config.job.seed * 1000003 + c.id;
    sampler.frequency_order = config.frequency_order;
    sampler.frequency_order_period = config.frequency_order_period;
    s->devices.emplace_back(client::ImportanceSampler(c.samples.size(), sampler), sampler.seed);
  }
  s->last_eval = s->model.evaluate(test, config.eval_samples);
  return std::unique_ptr<Simulator>(new Simulator(std::move(s)));
}

Simulator::Simulator(std::unique_ptr<State> state) : state_(std::move(state)) {}
Simulator::~Simulator() = default;

double Simulator::now_s() const { return state_->now; }
RoundIndex Simulator::rounds() const { return state_->job->last_round(); }
const std::vector<SimClient>& Simulator::fleet() const { return state_->fleet; }
std::string Simulator::policy() const { return state_->job->policy_name(); }
const std::string& Simulator::model_checksum() const { return state_->job->model()->checksum; }
const nlohmann::json& Simulator::policy_state() const { return state_->job->policy_state(); }
void Simulator::set_update_observer(UpdateObserver observer) {
  state_->on_update = std::move(observer);
}

Result<RoundRecord> Simulator::run_round() {
  State& s = *state_;
  if (s.job->config().asynchronous()) return run_buffer();
  const SimConfig& cfg = s.config;
  // Open when the engine finds enough available clients, as the coordinator's driver does.
  auto opened = s.open_when_possible();
  if (!opened.ok()) return opened.status();
  rounds::Round& round = *opened;
  FEDCASE_RETURN_IF_ERROR(s.apply(round.selection_changes()));
  RoundRecord rec;
  rec.round = round.index();
  rec.open_s = s.now;
  rec.available = round.available();
  rec.deadline_s = round.deadline() - round.opened_at();
  rec.invited = round.tasks().size();

  // Every online invitee fetches its task at once and reads its samples; those that stay
  // online until they finish upload, in order of their modelled durations.
  std::vector<Attempt> finishers;
  for (size_t t = 0; t < round.tasks().size(); ++t) {
    const scheduling::ClientTask& task = round.tasks()[t];
    const size_t i = s.index_of.at(task.client);
    TaskTrace trace;
    trace.client = task.client;
    trace.start_s = s.now;
    trace.online_at_open = s.fleet[i].spells.online_at(s.now);
    if (trace.online_at_open) {
      round.hand_out(task.client, round.opened_at());
      Attempt a;
      a.task = t;
      a.client = i;
      FEDCASE_RETURN_IF_ERROR(s.attempt(a, task));
      trace.duration_s = a.duration_s;
      trace.cache_hits = a.report.cache_hits;
      trace.cache_misses = a.report.cache_misses;
      trace.bytes = a.report.download_bytes + a.report.upload_bytes;
      if (s.fleet[i].spells.online_until(s.now) >= s.now + a.duration_s) {
        finishers.push_back(std::move(a));
      }
    }
    rec.tasks.push_back(trace);
  }
  std::stable_sort(finishers.begin(), finishers.end(),
                   [](const Attempt& a, const Attempt& b) { return a.duration_s < b.duration_s; });

  // The round admits uploads as the coordinator does; admitted ones train for real.
  double close_at = round.deadline();
  double hit_ratio_sum = 0;
  for (Attempt& a : finishers) {
    const scheduling::ClientTask& task = round.tasks()[a.task];
    const double at = round.opened_at() + a.duration_s;
    const rounds::Admission admission = round.admission(task.client, at);
    rec.tasks[a.task].finished = at <= round.deadline();
    if (admission != rounds::Admission::kWanted) continue;
    auto aggregate = round.reserve(task.client, at);
    if (!aggregate.ok()) return aggregate.status();
    s.now = at - kClockOrigin;  // the update's arrival, for the observer
    Status trained = s.train_and_add(a, task, *s.job->model(), **aggregate, 1.0, round.index());
    if (!trained.ok()) {
      round.release(task.client);
      return trained;
    }
    FEDCASE_RETURN_IF_ERROR(s.apply({round.accept(task.client, a.report, at)}));
    scheduling::observe_heartbeat(s.profiles[a.client], at);
    const uint64_t reads = a.report.cache_hits + a.report.cache_misses;
    hit_ratio_sum += reads ? double(a.report.cache_hits) / double(reads) : 0;
    rec.tasks[a.task].kept = true;
    if (round.filled()) close_at = at;
  }
  rec.participants = round.accepted();
  rec.hit_ratio = rec.participants ? hit_ratio_sum / double(rec.participants) : 0;
  for (const TaskTrace& t : rec.tasks) {
    rec.dropped += !t.finished;
    // A finisher not kept sent its update for nothing; every online task worked until it
    // finished, its client went offline, or the round closed.
    rec.wasted += t.finished && !t.kept;
    rec.bytes += t.finished ? t.bytes : 0;
    if (!t.online_at_open) continue;
    const double until = std::min({t.start_s + t.duration_s, close_at - kClockOrigin,
                                   s.fleet[s.index_of.at(t.client)].spells.online_until(t.start_s)});
    rec.client_s += std::max(0.0, until - t.start_s);
  }

  const rounds::Conclusion conclusion = s.job->conclude(round, close_at);
  FEDCASE_RETURN_IF_ERROR(s.apply(conclusion.profile_changes));
  const double samples = conclusion.metrics["samples"].get<double>();
  rec.train_loss = samples > 0 ? conclusion.metrics["train_loss"].get<double>() : kNaN;
  rec.committed = conclusion.state == RoundState::kCommitted;
  if (rec.committed) {
    s.job->adopt(conclusion);
    FEDCASE_RETURN_IF_ERROR(s.model.set_parameters(s.job->model()->params()));
    s.last_eval = s.model.evaluate(s.test, cfg.eval_samples);
  }
  rec.accuracy = s.last_eval.accuracy;
  rec.loss = s.last_eval.loss;
  s.now = close_at - kClockOrigin;
  rec.close_s = s.now;
  return rec;
}

}  // namespace fedcase::sim

namespace fedcase::sim {

Result<RoundRecord> Simulator::run_buffer() {
  State& s = *state_;
  const SimConfig& cfg = s.config;
  if (!s.buffer) {
    auto opened = s.open_when_possible();
    if (!opened.ok()) return opened.status();
    s.buffer = std::move(opened).value();
    FEDCASE_RETURN_IF_ERROR(s.refill());
  }
  rounds::Round& b = *s.buffer;
  RoundRecord rec;
  rec.round = b.index();
  rec.open_s = b.opened_at() - kClockOrigin;
  rec.available = b.available();
  double hit_ratio_sum = 0, staleness_sum = 0;
  // Events in time order: an update's arrival, a task's deadline, or an idle wait for clients.
  while (!b.filled()) {
    std::optional<ClientId> arriving;
    for (const auto& [id, f] : s.flights) {
      if (f.reports && (!arriving || f.finish < s.flights.at(*arriving).finish)) arriving = id;
    }
    const std::optional<double> deadline = b.next_deadline();
    if (!arriving && !deadline) {
      s.now += cfg.idle_wait_s;
      if (s.now > cfg.max_virtual_s) return resource_exhausted("too few clients available");
      FEDCASE_RETURN_IF_ERROR(s.refill());
      continue;
    }
    if (deadline && (!arriving || *deadline - kClockOrigin < s.flights.at(*arriving).finish)) {
      s.now = std::max(s.now, *deadline - kClockOrigin);
      FEDCASE_RETURN_IF_ERROR(s.apply(s.job->expire(b, s.now + kClockOrigin)));
      rec.client_s += s.end_lost_flights();
      FEDCASE_RETURN_IF_ERROR(s.refill());
      continue;
    }
    const ClientId id = *arriving;
    Flight f = std::move(s.flights.at(id));
    s.flights.erase(id);
    s.now = f.finish;
    const double at = s.now + kClockOrigin;
    rec.client_s += f.finish - f.start;
    rec.bytes += f.attempt.report.download_bytes + f.attempt.report.upload_bytes;
    if (b.admission(id, at) != rounds::Admission::kWanted) {
      ++rec.wasted;  // too late, or too stale: refused
      FEDCASE_RETURN_IF_ERROR(s.refill());
      continue;
    }
    const rounds::Round::Terms terms = *b.terms_for(id);
    const double discount = s.job->discount(b, id);
    auto aggregate = b.reserve(id, at);
    if (!aggregate.ok()) return aggregate.status();
    Status trained = s.train_and_add(f.attempt, f.task, *s.versions.at(terms.base_version),
                                     **aggregate, discount, terms.round);
    if (!trained.ok()) {
      b.release(id);
      return trained;
    }
    staleness_sum += double(b.staleness(id));
    FEDCASE_RETURN_IF_ERROR(s.apply({b.accept(id, f.attempt.report, at)}));
    scheduling::observe_heartbeat(s.profiles[f.attempt.client], at);
    const uint64_t reads = f.attempt.report.cache_hits + f.attempt.report.cache_misses;
    hit_ratio_sum += reads ? double(f.attempt.report.cache_hits) / double(reads) : 0;
    if (!b.filled()) FEDCASE_RETURN_IF_ERROR(s.refill());
  }
  rec.tasks = std::move(s.dispatched);
  s.dispatched.clear();
  rec.participants = b.accepted();
  rec.invited = b.invited().size();
  rec.dropped = b.dropped().size();
  rec.hit_ratio = rec.participants ? hit_ratio_sum / double(rec.participants) : 0;
  rec.mean_staleness = rec.participants ? staleness_sum / double(rec.participants) : 0;

  const rounds::Conclusion conclusion = s.job->conclude(b, s.now + kClockOrigin);
  FEDCASE_RETURN_IF_ERROR(s.apply(conclusion.profile_changes));
  const double samples = conclusion.metrics["samples"].get<double>();
  rec.train_loss = samples > 0 ? conclusion.metrics["train_loss"].get<double>() : kNaN;
  rec.committed = conclusion.state == RoundState::kCommitted;
  if (rec.committed) {
    s.job->adopt(conclusion);
    FEDCASE_RETURN_IF_ERROR(s.model.set_parameters(s.job->model()->params()));
    s.last_eval = s.model.evaluate(s.test, cfg.eval_samples);
  }
  rec.accuracy = s.last_eval.accuracy;
  rec.loss = s.last_eval.loss;
  rec.close_s = s.now;
  // The next buffer opens at once with the tasks in flight (less those now too stale), and
  // refills its free slots; the versions no task trains from any more are let go.
  s.buffer.reset();
  if (s.job->last_round() < s.job->config().rounds) {
    auto next = s.try_open();
    if (!next.ok()) return next.status();
    if (*next) {
      s.buffer = std::move(**next);
      FEDCASE_RETURN_IF_ERROR(s.refill());
    }
  }
  rec.client_s += s.end_lost_flights();
  std::set<uint64_t> in_use;
  for (const auto& [id, f] : s.flights) {
    const rounds::Round::Terms* terms = s.buffer ? s.buffer->terms_for(id) : nullptr;
    if (terms) in_use.insert(terms->base_version);
  }
  for (auto it = s.versions.begin(); it != s.versions.end();) {
    it = in_use.count(it->first) ? std::next(it) : s.versions.erase(it);
  }
  return rec;
}

}  // namespace fedcase::sim
