#include "bench/device_emulator.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "bench/http_bench_util.h"
#include "bench/synthetic_update.h"
#include "common/blob.h"
#include "protocol/check_in.h"
#include "protocol/registration.h"
#include "protocol/task_offer.h"

namespace fedcase::bench {
namespace {

constexpr uint64_t kWakeReference = ~uint64_t(0);
constexpr size_t kKeptBody = size_t(64) << 10;        // a task or a registration's answer
constexpr double kRetryAfterS = 0.5;                  // a 503 without Retry-After
constexpr uint32_t kFirstSourceAddress = 0x7F000002;  // 127.0.0.2

// Failures of this process rather than of the coordinator or the path to it.
bool local_error(int error) {
  return error == EMFILE || error == ENFILE || error == EADDRNOTAVAIL || error == EAGAIN ||
         error == ENOBUFS || error == ENOMEM;
}

void raise_to(std::atomic<uint64_t>& peak, uint64_t value) {
  for (uint64_t seen = peak; value > seen && !peak.compare_exchange_weak(seen, value);) {
  }
}

// The open-file limit less what the rest of the process keeps for itself.
size_t connections_allowed() {
  constexpr size_t kKept = 1024;
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  return files.rlim_cur > 2 * kKept ? size_t(files.rlim_cur) - kKept : size_t(files.rlim_cur) / 2;
}

}  // namespace

DeviceEmulator::DeviceEmulator(const char* bench, const DeviceEmulatorOptions& options)
    : bench_(bench),
      options_(options),
      max_connections_(options.max_connections > 0 ? options.max_connections
                                                   : connections_allowed()),
      epoch_(std::chrono::steady_clock::now()),
      rng_(options.seed) {
  epoll_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeReference;
  if (epoll_ < 0 || wake_fd_ < 0 || epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_fd_, &event) != 0) {
    fail(std::string("epoll: ") + std::strerror(errno));
  }
  devices_.reserve(options_.devices);
  for (size_t d = 0; d < options_.devices; ++d) {
    devices_.emplace_back(options_.reconnect_window_s, options_.seed * 0x9E3779B97F4A7C15ull + d);
  }
  protocol::Registration registration;
  registration.sdk_version = "fedcase-device-emulator/1";
  registration.dataset_size = 100;
  registration_body_ = protocol::write_registration(registration).dump();
  registration_head_ = request_head("POST", "/v1/clients/register", options_.enrollment_token) +
                       "Content-Type: application/json\r\nContent-Length: " +
                       std::to_string(registration_body_.size()) + "\r\n\r\n";
  char wait[32];
  std::snprintf(wait, sizeof wait, "%g", options_.poll_wait_s);
  poll_target_ = std::string("/v1/task?wait=") + wait;
  update_values_.resize(options_.parameters);
  fill_update(update_values_, options_.seed);
}

DeviceEmulator::~DeviceEmulator() {
  stop();
  close(wake_fd_);
  close(epoll_);
}

void DeviceEmulator::start() {
  thread_ = std::thread([this] { run(); });
}

void DeviceEmulator::stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof one) != sizeof one) fail("eventfd write");
  thread_.join();
  for (Device& d : devices_) close_connection(d);
}

double DeviceEmulator::clock_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
}

DeviceEmulator::Counters DeviceEmulator::counters() const {
  const AtomicCounters& c = counters_;
  return {c.registered,           c.check_ins,       c.tasks,
          c.uploads_accepted,     c.uploads_refused, c.retried_503,
          c.connection_failures,  c.local_failures,  c.open_connections,
          c.peak_open_connections};
}

double DeviceEmulator::first_registration_sent_s() const {
  std::lock_guard<std::mutex> lock(log_mutex_);
  return first_registration_sent_s_;
}

std::vector<double> DeviceEmulator::registrations_answered_s() const {
  std::lock_guard<std::mutex> lock(log_mutex_);
  return registrations_s_;
}

std::vector<CheckInRecord> DeviceEmulator::check_ins(double from_s, double to_s) const {
  std::lock_guard<std::mutex> lock(log_mutex_);
  std::vector<CheckInRecord> out;
  for (const CheckInRecord& r : check_in_log_) {
    if (r.sent_s >= from_s && r.sent_s < to_s) out.push_back(r);
  }
  return out;
}

void DeviceEmulator::fail(const std::string& what) const {
  die(bench_, "device emulator: " + what);
}

DeviceEmulator::Connection* DeviceEmulator::find(uint64_t reference) {
  const uint32_t slot = uint32_t(reference);
  if (slot >= connections_.size()) return nullptr;
  Connection& c = connections_[slot];
  return c.fd >= 0 && c.generation == uint32_t(reference >> 32) ? &c : nullptr;
}

void DeviceEmulator::run() {
  admit_registrations();
  std::vector<epoll_event> events(1024);
  while (!stopping_) {
    run_due_timers();
    while (!ready_.empty()) {
      const uint64_t reference = ready_.back();
      ready_.pop_back();
      if (Connection* c = find(reference)) pump(*c);
    }
    int timeout_ms = 1000;
    if (!timers_.empty()) {
      const double until_s = timers_.top().first - clock_s();
      timeout_ms = std::clamp(int(std::ceil(until_s * 1e3)), 0, timeout_ms);
    }
    const int n = epoll_wait(epoll_, events.data(), int(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) fail(std::string("epoll_wait: ") + std::strerror(errno));
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == kWakeReference) continue;  // stopping_ ends the loop
      if (Connection* c = find(events[i].data.u64)) on_event(*c, events[i].events);
    }
  }
}

void DeviceEmulator::run_due_timers() {
  const double now = clock_s();
  while (!timers_.empty() && timers_.top().first <= now) {
    const uint32_t device = timers_.top().second;
    timers_.pop();
    wake(device);
  }
}

void DeviceEmulator::admit_registrations() {
  while (registering_ < options_.registrations_in_flight && next_to_register_ < devices_.size()) {
    const uint32_t device = uint32_t(next_to_register_++);
    ++registering_;
    if (device == 0) {
      std::lock_guard<std::mutex> lock(log_mutex_);
      first_registration_sent_s_ = clock_s();
    }
    devices_[device].phase = Phase::kRegistering;
    wake(device);
  }
}

void DeviceEmulator::wake(uint32_t device) {
  Device& d = devices_[device];
  switch (d.phase) {
    case Phase::kRegistering:
      return send(device, registration_head_, registration_body_);
    case Phase::kPolling:
      return send(device, poll_head(d));
    case Phase::kTraining:
      d.phase = Phase::kUploading;
      [[fallthrough]];
    case Phase::kUploading: {
      const std::string& update = update_for(d.model_version);
      return send(device, upload_head(d.upload_url, d.token, update.size()), update);
    }
    case Phase::kWaitingToRegister:
      fail("a device woke before it registered");
  }
}

std::string DeviceEmulator::poll_head(const Device& device) const {
  return request_head("GET", poll_target_, device.token) + "\r\n";
}

const std::string& DeviceEmulator::update_for(uint64_t model_version) {
  auto it = updates_.find(model_version);
  if (it == updates_.end()) {
    const std::string blob =
        encode_blob({model_version, {{{"w", {options_.parameters}}}}, update_values_});
    it = updates_.emplace(model_version, blob).first;
  }
  return it->second;
}

void DeviceEmulator::send(uint32_t device, std::string head, std::string_view body) {
  Device& d = devices_[device];
  const double now = clock_s();
  if (d.connection < 0 && (d.connection = open_connection(device)) < 0) return;
  Connection& c = connections_[size_t(d.connection)];
  c.head = std::move(head);
  c.body = body;
  c.written = 0;
  c.writing = true;
  c.sent_s = now;
  // A connection still connecting is written to once epoll says it has connected.
  if (c.connected) ready_.push_back(reference(c));
}

int32_t DeviceEmulator::open_connection(uint32_t device) {
  const double now = clock_s();
  if (counters_.open_connections >= max_connections_) {
    failed(device, now, EMFILE);
    return -1;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    failed(device, now, errno);
    return -1;
  }
  // The port is picked at connect, for the whole 4-tuple, not reserved at bind for any peer.
  const int on = 1;
  setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof on);
  const sockaddr_in source =
      ipv4_address(kFirstSourceAddress + uint32_t(device % options_.source_addresses), 0);
  const sockaddr_in coordinator = loopback_address(options_.port);
  int error = 0;
  bool connected = false;
  if (bind(fd, reinterpret_cast<const sockaddr*>(&source), sizeof source) != 0) {
    error = errno;
  } else if (connect(fd, reinterpret_cast<const sockaddr*>(&coordinator), sizeof coordinator) ==
             0) {
    connected = true;
  } else if (errno != EINPROGRESS) {
    error = errno;
  }
  if (error != 0) {
    close(fd);
    failed(device, now, error);
    return -1;
  }
  int32_t slot;
  if (!free_connections_.empty()) {
    slot = free_connections_.back();
    free_connections_.pop_back();
  } else {
    slot = int32_t(connections_.size());
    connections_.emplace_back();
    connections_.back().slot = slot;
  }
  Connection& c = connections_[size_t(slot)];
  c.fd = fd;
  c.device = device;
  ++c.generation;
  c.connected = connected;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  event.data.u64 = reference(c);
  if (epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &event) != 0) {
    fail(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  raise_to(counters_.peak_open_connections, ++counters_.open_connections);
  return slot;
}

void DeviceEmulator::close_connection(Device& device) {
  if (device.connection < 0) return;
  Connection& c = connections_[size_t(device.connection)];
  close(c.fd);  // leaves the epoll with it
  c.fd = -1;
  c.connected = c.writing = false;
  c.head.clear();
  c.body = {};
  c.answer = AnswerReader(kKeptBody);
  free_connections_.push_back(device.connection);
  device.connection = -1;
  --counters_.open_connections;
}

void DeviceEmulator::on_event(Connection& c, uint32_t events) {
  if (!c.connected) {
    int error = 0;
    socklen_t length = sizeof error;
    if (getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
    if (error != 0) return failed(c.device, c.sent_s, error);
    if (!(events & EPOLLOUT)) return;
    c.connected = true;
  }
  pump(c);
}

// Writes what it can, then reads until the socket would block (edge-triggered: no later event
// says again that bytes are waiting); an answer ends the pump (it may start the next request).
void DeviceEmulator::pump(Connection& c) {
  while (c.writing) {
    const size_t total = c.head.size() + c.body.size();
    if (c.written == total) {
      c.writing = false;
      break;
    }
    const bool in_head = c.written < c.head.size();
    const char* from =
        in_head ? c.head.data() + c.written : c.body.data() + (c.written - c.head.size());
    const size_t left = in_head ? c.head.size() - c.written : total - c.written;
    const ssize_t n = ::send(c.fd, from, left, MSG_NOSIGNAL);
    if (n > 0) {
      c.written += size_t(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      break;
    } else if (errno != EINTR) {
      return failed(c.device, c.sent_s, errno);
    }
  }
  static char buffer[64 << 10];
  for (;;) {
    const ssize_t n = recv(c.fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      auto answer = c.answer.take(buffer, size_t(n));
      if (!answer.ok()) fail(answer.status().message());
      if (*answer) return answered(c, **answer);
    } else if (n == 0) {
      return failed(c.device, c.sent_s, ECONNRESET);  // closed before its answer
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else if (errno != EINTR) {
      return failed(c.device, c.sent_s, errno);
    }
  }
}

void DeviceEmulator::answered(Connection& c, const Answer& answer) {
  const uint32_t device = c.device;
  const double sent_s = c.sent_s;
  const double now = clock_s();
  Device& d = devices_[device];
  // The next request opens a connection of its own unless it follows at once on this one.
  if (!answer.keeps_alive()) close_connection(d);
  if (answer.status == 503) {
    if (d.phase == Phase::kPolling) record_check_in(sent_s, now, answer.status);
    ++counters_.retried_503;
    close_connection(d);
    const auto retry_after = answer.header("Retry-After");
    const double delay_s =
        retry_after ? std::strtod(std::string(*retry_after).c_str(), nullptr) : kRetryAfterS;
    return sleep_until(device, now + std::max(delay_s, 0.0));
  }
  switch (d.phase) {
    case Phase::kRegistering:
      return answered_registration(device, answer, now);
    case Phase::kPolling:
      return answered_poll(device, answer, sent_s, now);
    case Phase::kUploading:
      ++(answer.status == 200 ? counters_.uploads_accepted : counters_.uploads_refused);
      d.phase = Phase::kPolling;
      return send(device, poll_head(d));
    case Phase::kWaitingToRegister:
    case Phase::kTraining:
      fail("an answer nobody asked for");
  }
}

void DeviceEmulator::answered_registration(uint32_t device, const Answer& answer, double now) {
  if (answer.status != 201) {
    fail("registration: " + std::to_string(answer.status) + " " + answer.body);
  }
  const auto reply = protocol::read_registration_reply(
      nlohmann::json::parse(answer.body, nullptr, /*allow_exceptions=*/false));
  if (!reply.ok()) fail("registration: " + reply.status().to_string());
  Device& d = devices_[device];
  d.token = reply->token;
  d.pacer.answered(now, std::nullopt);  // ends a time without the coordinator, if there was one
  {
    std::lock_guard<std::mutex> lock(log_mutex_);
    registrations_s_.push_back(now);
  }
  ++counters_.registered;
  --registering_;
  d.phase = Phase::kPolling;
  send(device, poll_head(d));
  admit_registrations();
}

void DeviceEmulator::answered_poll(uint32_t device, const Answer& answer, double sent_s,
                                   double now) {
  Device& d = devices_[device];
  record_check_in(sent_s, now, answer.status);
  ++counters_.check_ins;
  if (answer.status == 204) {
    std::optional<protocol::CheckIn> window;
    if (const auto header = answer.header(protocol::kCheckInHeader)) {
      auto read = protocol::read_check_in(*header);
      if (!read.ok()) fail("poll: " + read.status().to_string());
      window = *read;
    }
    const double next_s = d.pacer.answered(now, window);
    if (!window) return send(device, poll_head(d));
    close_connection(d);
    return sleep_until(device, next_s);
  }
  if (answer.status != 200) {
    fail("poll: " + std::to_string(answer.status) + " " + answer.body);
  }
  const auto task = protocol::read_task_offer(
      nlohmann::json::parse(answer.body, nullptr, /*allow_exceptions=*/false));
  if (!task.ok()) fail("task: " + task.status().to_string());
  if (task->secure_aggregation) fail("a secure task: the emulator uploads plainly");
  d.pacer.answered(now, std::nullopt);
  ++counters_.tasks;
  d.model_version = task->model_version;
  d.upload_url = task->upload_url;
  d.phase = Phase::kTraining;
  close_connection(d);
  std::uniform_real_distribution<double> training(options_.train_min_s, options_.train_max_s);
  sleep_until(device, now + training(rng_));
}

void DeviceEmulator::failed(uint32_t device, double sent_s, int error) {
  Device& d = devices_[device];
  const double now = clock_s();
  close_connection(d);
  ++(local_error(error) ? counters_.local_failures : counters_.connection_failures);
  if (d.phase == Phase::kPolling) record_check_in(sent_s, now, 0);
  if (d.phase == Phase::kUploading) d.phase = Phase::kPolling;  // the update is lost
  sleep_until(device, d.pacer.unreachable(now));
}

void DeviceEmulator::record_check_in(double sent_s, double answered_s, int status) {
  std::lock_guard<std::mutex> lock(log_mutex_);
  check_in_log_.push_back({sent_s, answered_s, status});
}

// ---- Figures of a check-in log ----------------------------------------------------------------

std::vector<size_t> per_bin(const std::vector<double>& times, double from_s, double to_s,
                            double bin_s) {
  std::vector<size_t> bins(to_s > from_s ? size_t(std::ceil((to_s - from_s) / bin_s)) : 0);
  for (double t : times) {
    if (t >= from_s && t < to_s) ++bins[std::min(bins.size() - 1, size_t((t - from_s) / bin_s))];
  }
  return bins;
}

double peak_to_mean(const std::vector<size_t>& bins) {
  size_t total = 0, peak = 0;
  for (size_t b : bins) {
    total += b;
    peak = std::max(peak, b);
  }
  return total == 0 ? 0 : double(peak) * double(bins.size()) / double(total);
}

CheckInLatencies check_in_latencies(const std::vector<CheckInRecord>& log, double poll_wait_s) {
  CheckInLatencies out;
  for (const CheckInRecord& r : log) {
    if (r.status == 0) continue;
    const double latency = r.answered_s - r.sent_s;
    out.all.push_back(latency);
    if (r.status == 200) {
      out.task.push_back(latency);
    } else if (r.status == 204 && latency < poll_wait_s) {
      out.at_once.push_back(latency);
    } else if (r.status == 204) {
      out.past_wait.push_back(latency - poll_wait_s);
    }
  }
  return out;
}

}  // namespace fedcase::bench
