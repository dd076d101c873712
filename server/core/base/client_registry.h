#pragma once
// The coordinator's clients: bearer tokens, registration, contacts (heartbeats), and each
// client's scheduling profile, kept in memory and written through to the store.
//
// Thread safety: every method may be called from any thread. One internal mutex guards the
// clients; no store call runs while it is held (decide under the lock, write outside it,
// publish under it), so a registration's fsync never delays a heartbeat. A contact never
// writes to the store: flush(), called by the round driver, saves last contacts in batches.
// The registry's `changed` callback tells the driver when a client may have become free to
// take a task, or when contacts wait to be saved.

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/ids.h"
#include "common/mutex.h"
#include "common/status.h"
#include "protocol/registration.h"
#include "rounds/round.h"
#include "scheduling/profile.h"
#include "storage/store.h"

namespace fedcase::server {

// A copy of what the registry knows of one client.
struct ClientSnapshot {
  storage::ClientRecord record;  // id, info, registered_at, last_seen (snapshot() only)
  scheduling::ClientProfile profile;
  bool available = false;                     // heard from within the client timeout
  std::map<std::string, std::string> labels;  // given at registration
};

class ClientRegistry {
 public:
  // `store` must outlive the registry. `params` say how profiles smooth observations and when
  // a silent client counts as offline. `changed` (may be empty) is called, on the caller's
  // thread and outside the registry's lock, after a registration, after a contact from a
  // client that was offline, and after the first contact left unsaved since the last flush;
  // it must only hand the work elsewhere.
  ClientRegistry(storage::Store& store, scheduling::ProfileParams params,
                 std::function<void()> changed = {});

  // Loads every stored client. kInternal / kInvalidArgument for an unreadable store or profile.
  [[nodiscard]] Status load();
  // Reads what changed in the store since the last reading (load() or refresh()), for
  // replicas sharing the database: adds the clients registered through another replica, and
  // takes each contact another replica saved since (a batch of them a row, Store::
  // contacts_after) as a heartbeat when it is later than the one known here. Profiles of known
  // clients stay as this registry has them. What it reads grows with registrations and with
  // the other replicas' saves (at most one a replica per flush), not with the fleet or its
  // contacts: nothing when nothing changed. Errors as load()'s; calls `changed` when it learned
  // something. One caller at a time.
  [[nodiscard]] Status refresh();
  // Rows read from the store by load() and refresh() so far: clients, and contact batches (a
  // row each).
  uint64_t rows_read() const;

  // The client whose token hashes to `token_hash`, if any.
  std::optional<ClientId> identify(const std::string& token_hash) const;
  // As identify(), and when the registry does not know the token, the store's client holding
  // it (registered through another replica sharing the database) is looked up and added, as
  // refresh() would add it: a store call (TokenLookups runs it off the request threads).
  // nullopt for a token no client holds; the store's error when it cannot answer.
  Result<std::optional<ClientId>> learn(const std::string& token_hash);

  // Registers a client with its `registration` at `now`; the record's info is the registration
  // as protocol::write_registration writes it. Returns its id and bearer token (shown only
  // here). kInvalidArgument for a bad measurement.
  struct Registration {
    ClientId id = 0;
    std::string token;
  };
  [[nodiscard]] Result<Registration> register_client(const protocol::Registration& registration,
                                                     double now);

  // A contact from `client` at `now`, in memory only. kNotFound for an unknown client.
  [[nodiscard]] Status touch(ClientId client, double now);
  // `client`, in contact at `now`, was told to sleep until its check-in window that ends at
  // `back_by` (scheduling::observe_steered): unavailable until it checks in again. In memory,
  // saved by flush(); kNotFound for an unknown client.
  [[nodiscard]] Status steer(ClientId client, double now, double back_by);
  // The rank in [0, 1] of the client's statistical utility among the utilities of the clients
  // that reported one (the measure the selection policies rank by: pace steering brings the
  // higher ones back sooner); 0.5 for a client without one, or an unknown client. O(log n):
  // the order is kept as round decisions change utilities (apply()).
  double utility_rank(ClientId client) const;
  // The Ed25519 public key (32 raw bytes) each of `clients` known here registered
  // (protocol::Registration::signing_public_key; "" for one that registered none): secure
  // rounds check the keys they advertise against it. A client not known here is left out.
  // Reads each client's registration.
  std::map<ClientId, std::string> signing_keys(const std::vector<ClientId>& clients) const;
  // How many clients are registered. O(1).
  size_t size() const;
  // How many clients are available at `now`, as census(now).available, in O(1) amortized plus
  // the clients whose availability lapsed in the last few seconds.
  size_t available_count(double now);
  // Saves every last contact not yet saved, kSavePage clients a transaction (logged on
  // failure).
  void flush();
  // Whether some last contact waits for flush().
  bool has_unsaved() const;

  // Copies of every client, ordered by id: with their records for the admin views, or only
  // their profiles, availability and labels for selection (cheaper).
  std::vector<ClientSnapshot> snapshot(double now) const;
  std::vector<ClientSnapshot> profiles(double now) const;

  // How many clients are registered, and how many of them are available at `now`. Like
  // eligible(), it reads only the clients heard from within the offline gap and not told to
  // sleep (kept ordered by when that lapses): its cost grows with the available clients, not
  // with the fleet, so a steered fleet's check-ins can each wake the round driver. Exact for
  // a `now` at most kLapseSlackS (10 s) before the latest time a contact or available_count()
  // was given: a client whose availability lapsed before that is no longer looked at.
  struct Census {
    size_t registered = 0;
    size_t available = 0;
  };
  Census census(double now) const;
  // Of the clients available at `now` and registered with every one of `labels` (none: every
  // client), how many there are and how many of them are not `busy`. Copies nothing.
  struct Eligible {
    size_t available = 0, free = 0;
  };
  Eligible eligible(double now, const std::map<std::string, std::string>& labels,
                    const std::set<ClientId>& busy) const;

  // Applies round decisions to the profiles; an unknown client is skipped, a bad report is
  // logged and leaves that profile unchanged.
  void apply(const std::vector<rounds::ProfileChange>& changes);
  // Writes the profiles and last contacts of `ids`, kSavePage clients a transaction, each one
  // contact batch (logged on failure).
  void save(const std::vector<ClientId>& ids);
  // The most clients one transaction of save() writes: what a save builds (each client's
  // profile as JSON, then the batch that carries them: about 10 KB a client) is bounded by
  // it, not by the contacts that came since the last save (the whole fleet after its
  // enrolment, or after an outage).
  static constexpr size_t kSavePage = 1000;

 private:
  // What a stored client record holds, as compact as a large fleet needs: no JSON tree (one
  // costs about a KiB per client), the token's hash only as token_hashes_'s key.
  struct Entry {
    std::string info;  // the registration, as compact JSON text (parsed for snapshot())
    double registered_at = 0;
    double last_seen = 0;
    scheduling::ClientProfile profile;          // save() writes it out as JSON
    std::map<std::string, std::string> labels;  // from the registration
    double online_until = 0;                    // its key in online_until_; 0: not there
  };

  // A stored client as an entry; errors as load()'s.
  static Result<Entry> entry_of(const storage::ClientRecord& record);
  // Sorts the utilities of the clients that reported one into utilities_.
  void order_utilities() FEDCASE_REQUIRES(mu_);
  // Puts the utility of `profile`, if it reported one, in its place in utilities_ (O(n), for
  // a client added one at a time).
  void add_utility(const scheduling::ClientProfile& profile) FEDCASE_REQUIRES(mu_);
  // Takes one `utility` out of utilities_ (a client's, before it changed; O(n)).
  void remove_utility(double utility) FEDCASE_REQUIRES(mu_);
  // Adds `entry` as client `id` holding the token that hashes to `token_hash`, or replaces the
  // one there, with its availability.
  void insert(const std::string& token_hash, ClientId id, Entry entry) FEDCASE_REQUIRES(mu_);
  // Puts client `id` in online_until_ as its availability now says (after every change to it).
  void index_availability(ClientId id, Entry& c) FEDCASE_REQUIRES(mu_);
  // Drops from online_until_ the clients whose availability lapsed long before `now`.
  void forget_lapsed(double now) FEDCASE_REQUIRES(mu_);
  // Reads the contact batches saved since the last one read and takes their contacts
  // (take_contact); whether one changed a client here. When batches it had not read were
  // dropped meanwhile, it takes every client row's last contact instead (contacts_from_rows).
  Result<bool> read_contacts();
  // Takes every stored client's last contact (its row's last_seen and profile).
  Result<bool> contacts_from_rows();
  // Takes a saved contact later than the client's last one known here as a heartbeat (with
  // the sleep it was told of, if any); whether it did.
  bool take_contact(const storage::ClientRecord& contact) FEDCASE_REQUIRES(mu_);
  // Calls f(id, entry) for every client available at `now`, in no particular order.
  template <typename F>
  void for_each_available(double now, F f) const FEDCASE_REQUIRES(mu_);

  storage::Store& store_;
  const scheduling::ProfileParams params_;
  const std::function<void()> changed_;
  mutable Mutex mu_;
  std::unordered_map<std::string, ClientId> token_hashes_ FEDCASE_GUARDED_BY(mu_);
  std::map<ClientId, Entry> clients_ FEDCASE_GUARDED_BY(mu_);
  std::set<ClientId> unsaved_ FEDCASE_GUARDED_BY(mu_);  // contacts not yet saved
  std::vector<double> utilities_ FEDCASE_GUARDED_BY(mu_);  // ascending (order_utilities)
  // Every client that may be available, by the time its availability lapses (its last contact
  // plus the offline gap; a client told to sleep is not here until it checks in again), with
  // its entry in clients_ (whose nodes stay put): a scan reads no other map.
  std::map<std::pair<double, ClientId>, Entry*> online_until_ FEDCASE_GUARDED_BY(mu_);
  uint64_t read_up_to_ FEDCASE_GUARDED_BY(mu_) = 0;  // the last change load/refresh read
  uint64_t contacts_read_up_to_ FEDCASE_GUARDED_BY(mu_) = 0;  // the last contact batch read
  uint64_t rows_read_ FEDCASE_GUARDED_BY(mu_) = 0;
};

}  // namespace fedcase::server
