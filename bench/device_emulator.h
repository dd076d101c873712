#pragma once
// A fleet of emulated devices on one thread, to load a coordinator as a large steered fleet
// would: up to 100,000 devices, each with its own registration, token and CheckInPacer
// (client_sdk/check_in_pacer.h), over plain HTTP to 127.0.0.1.
//
// Each device registers, then loops: a task poll (GET /v1/task?wait=W); answered 204, it
// closes its connection and sleeps until the point of the Fedcase-Check-In window its pacer
// draws (no header: it polls again at once); answered 200, it "trains" for a uniform time of
// the configured range without a connection, then uploads an update of the task's model
// version (one tensor "w" of P floats, the same values for every device) and polls again. A
// connection refused, reset or closed before its answer is an outage: the pacer's
// unreachable() says when to try again (an upload lost so is not sent again: the device
// polls). 503 is retried after its Retry-After (0.5 s without one).
//
// Why one thread: a thread or an asio client per device costs more than the coordinator's
// answer and would measure the emulator; here the sockets are non-blocking on one
// edge-triggered epoll, sleeping and training devices wait in one timer heap, and a device
// holds a connection only while its next request follows at once (a kept-alive connection
// carries registration -> poll and upload -> poll). Devices connect from 127.0.0.2 onwards
// (device d from the (d % source_addresses)-th address, the port picked at connect), so that
// 100,000 devices and the TIME_WAIT sockets their closes leave do not exhaust one address's
// ephemeral ports. The open-file limit is the caller's: raise it to the hard limit first.
//
// Ownership: the emulator owns its sockets, epoll and thread; the destructor stops the thread
// and closes everything.
// Thread safety: start() and stop() from the owning thread; every other public method from
// any thread, while the fleet runs or after it stopped (the log is behind a mutex the fleet's
// thread takes once per event; the counters are atomics).
// Errors: a connection that fails is the outage it stands for (counted, never fatal); so is a
// local failure (no descriptor or port left), counted apart because it is the emulator's
// limit, not the coordinator's. An answer a device cannot make sense of (an unexpected status
// on a poll or a registration, a malformed body) ends the benchmark (die): its figures would
// be wrong.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <queue>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/http_wire.h"
#include "client_sdk/check_in_pacer.h"

namespace fedcase::bench {

struct DeviceEmulatorOptions {
  uint16_t port = 0;  // the coordinator's, on 127.0.0.1
  std::string enrollment_token;
  size_t devices = 1000;
  double poll_wait_s = 10;  // each task poll's ?wait=
  double train_min_s = 1;   // a task's emulated training time is uniform in [min, max]
  double train_max_s = 3;
  size_t parameters = 1000;        // the update: one tensor "w" of this many floats
  double reconnect_window_s = 30;  // each pacer's window until a coordinator tells it one
  size_t source_addresses = 64;    // 127.0.0.2, 127.0.0.3, ...
  // Registrations outstanding at once while the fleet enrolls (the others queue), so that
  // enrolment measures the coordinator's registration rate, not a connection flood.
  size_t registrations_in_flight = 64;
  // Sockets open at once at most; one more is a local failure (EMFILE), so that the rest of
  // the process keeps descriptors. 0: the open-file limit less 1,024.
  size_t max_connections = 0;
  uint64_t seed = 1;
};

// One task poll: when it was sent (its connection begun, if it needed one) and answered,
// seconds on the emulator's clock (clock_s); status 0: no answer (the connection failed).
struct CheckInRecord {
  double sent_s = 0;
  double answered_s = 0;
  int status = 0;
};

class DeviceEmulator {
 public:
  struct Counters {
    uint64_t registered = 0;
    uint64_t check_ins = 0;  // task polls answered 200 or 204
    uint64_t tasks = 0;      // of them, answered with a task
    uint64_t uploads_accepted = 0;
    uint64_t uploads_refused = 0;  // answered, but not 200 (a round closed meanwhile)
    uint64_t retried_503 = 0;
    uint64_t connection_failures = 0;  // refused, reset or closed early: the outage's
    uint64_t local_failures = 0;       // no descriptor or local port: the emulator's limit
    uint64_t open_connections = 0;
    uint64_t peak_open_connections = 0;
  };

  // Sets up the fleet (epoll, the devices and their pacers); nothing is sent before start().
  // Dies when the epoll or its wake-up descriptor cannot be made.
  DeviceEmulator(const char* bench, const DeviceEmulatorOptions& options);
  ~DeviceEmulator();
  DeviceEmulator(const DeviceEmulator&) = delete;
  DeviceEmulator& operator=(const DeviceEmulator&) = delete;

  // Starts the fleet's thread: every device enrols, then checks in as above.
  void start();
  // Stops the thread (at once: requests in flight are dropped) and closes every connection.
  void stop();

  // Seconds since construction on the clock of every time this emulator records.
  double clock_s() const;
  Counters counters() const;
  // Registration: when the first was sent and when each was answered 201.
  double first_registration_sent_s() const;
  std::vector<double> registrations_answered_s() const;
  // The task polls sent in [from_s, to_s), in the order they ended: a poll is logged once it
  // has ended, so a poll held by the coordinator shows up to its wait later.
  std::vector<CheckInRecord> check_ins(double from_s, double to_s) const;

 private:
  enum class Phase : uint8_t { kWaitingToRegister, kRegistering, kPolling, kTraining, kUploading };
  struct Device {
    Device(double reconnect_window_s, uint64_t seed) : pacer(reconnect_window_s, seed) {}
    client::CheckInPacer pacer;
    std::string token;
    std::string upload_url;  // of the task being trained
    uint64_t model_version = 0;
    int32_t connection = -1;  // while one is open
    Phase phase = Phase::kWaitingToRegister;
  };
  struct Connection {
    int32_t slot = 0;  // in connections_
    int fd = -1;
    uint32_t device = 0;
    uint32_t generation = 0;  // tells this use of the slot from its earlier ones in epoll events
    bool connected = false;
    std::string head;       // the request being written: its head, then
    std::string_view body;  // a body it does not own (the shared update)
    size_t written = 0;
    bool writing = false;
    double sent_s = 0;  // when the request began (with the connection it opened, if any)
    AnswerReader answer{64 << 10};
  };

  // A connection's slot and generation, as epoll events and the ready list name it.
  static uint64_t reference(const Connection& c) {
    return uint64_t(c.generation) << 32 | uint32_t(c.slot);
  }
  Connection* find(uint64_t reference);
  [[noreturn]] void fail(const std::string& what) const;  // die, naming the emulator

  void run();
  void run_due_timers();
  void admit_registrations();
  void wake(uint32_t device);
  void send(uint32_t device, std::string head, std::string_view body = {});
  int32_t open_connection(uint32_t device);
  void close_connection(Device& device);
  void on_event(Connection& connection, uint32_t events);
  void pump(Connection& connection);
  void answered(Connection& connection, const Answer& answer);
  void answered_registration(uint32_t device, const Answer& answer, double now);
  void answered_poll(uint32_t device, const Answer& answer, double sent_s, double now);
  void failed(uint32_t device, double sent_s, int error);
  void sleep_until(uint32_t device, double due_s) { timers_.emplace(due_s, device); }
  void record_check_in(double sent_s, double answered_s, int status);
  const std::string& update_for(uint64_t model_version);
  std::string poll_head(const Device& device) const;

  const char* bench_;
  const DeviceEmulatorOptions options_;
  const size_t max_connections_;  // options_.max_connections, or the limit it stands for
  const std::chrono::steady_clock::time_point epoch_;
  int epoll_ = -1;
  int wake_fd_ = -1;  // an eventfd: stop() wakes the thread through it
  std::thread thread_;
  std::atomic<bool> stopping_{false};

  // The fleet's thread alone.
  std::vector<Device> devices_;
  std::deque<Connection> connections_;  // a slot's address outlives others being added
  std::vector<int32_t> free_connections_;
  std::vector<uint64_t> ready_;               // a request begun on an open connection: write it
  using Timer = std::pair<double, uint32_t>;  // (due, device)
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  size_t next_to_register_ = 0, registering_ = 0;
  std::string registration_head_, registration_body_, poll_target_;
  std::vector<float> update_values_;
  std::map<uint64_t, std::string> updates_;  // the encoded update, by model version
  std::mt19937_64 rng_;                      // training times

  // Any thread.
  struct AtomicCounters {
    std::atomic<uint64_t> registered{0}, check_ins{0}, tasks{0}, uploads_accepted{0},
        uploads_refused{0}, retried_503{0}, connection_failures{0}, local_failures{0},
        open_connections{0}, peak_open_connections{0};
  } counters_;
  mutable std::mutex log_mutex_;
  double first_registration_sent_s_ = -1;    // guarded by log_mutex_
  std::vector<double> registrations_s_;      // guarded by log_mutex_
  std::vector<CheckInRecord> check_in_log_;  // guarded by log_mutex_
};

// ---- Figures of a check-in log (pure) -------------------------------------------------------

// Counts of `times` in consecutive bins of `bin_s` seconds over [from_s, to_s).
std::vector<size_t> per_bin(const std::vector<double>& times, double from_s, double to_s,
                            double bin_s);
// The largest bin over the mean bin (0 for no bins or none counted).
double peak_to_mean(const std::vector<size_t>& bins);

// Latencies (answered - sent) of the answered polls of a log, split by how the coordinator
// answered: with a task; 204 before the poll's wait was up (at once: no job wanted the device,
// or it was steered at once); 204 once its wait was up, less the wait (the coordinator's own
// delay). Seconds.
struct CheckInLatencies {
  std::vector<double> all, task, at_once, past_wait;
};
CheckInLatencies check_in_latencies(const std::vector<CheckInRecord>& log, double poll_wait_s);

}  // namespace fedcase::bench
