// Updates sent in chunks (upload sessions) over real HTTP: malformed chunk sequences are
// refused and change nothing, an update folds once it is whole and its digest holds, a session
// the round no longer needs is dropped; and an SDK fleet behind a link that drops its
// connections mid-body finishes its downloads and uploads, resuming where they stopped.

#include <doctest/doctest.h>

#include <cmath>

#include "client_sdk/fleet.h"
#include "common/blob.h"
#include "common/crypto.h"
#include "protocol/upload_session.h"
#include "tests/support/bad_requests.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/cutting_proxy.h"
#include "tests/support/store_snapshot.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

constexpr size_t kChunk = 64 << 10;

struct Invitee {
  std::unique_ptr<Caller> caller;
  json task;
};

// `client`'s PUT of bytes [first, first + length) of `update` to the session at `url`, with
// the Content-Range those bytes have (or `range`, when given).
Reply put_chunk(Caller& client, const std::string& url, const std::string& update, size_t first,
                size_t length, std::string range = "") {
  if (range.empty()) {
    range = protocol::write_content_range({first, first + length - 1, update.size()});
  }
  return client.call("PUT", url, update.substr(first, length),
                     {{"Content-Type", "application/octet-stream"}, {"Content-Range", range}});
}

Reply open_session(Caller& client, const std::string& uploads_url, const std::string& update,
                   const std::string& sha256) {
  return client.call("POST", uploads_url,
                     protocol::write_upload_open({update.size(), sha256}).dump(),
                     {{"Content-Type", "application/json"}, {"X-Fedcase-Meta", good_update_meta()}});
}

}  // namespace

TEST_CASE("a chunked upload: malformed chunks change nothing, the whole update folds once") {
  TempDir dir;
  // An update (about 400 KB) is larger than a plain upload may be: it goes in chunks.
  auto service = start_coordinator(dir, [](server::CoordinatorConfig& config) {
    config.upload_chunk_bytes = kChunk;
    config.max_upload_bytes = 256 << 10;
    config.max_chunked_upload_bytes = 1 << 20;
  });
  const uint16_t port = service->port();
  const std::string db = dir.file("fedcase.db");
  Caller admin(port, kAdminToken);
  Caller enroll(port, kEnrollmentToken);
  // K = 2 of 3 invited (over-commitment 1.5): the round commits with two updates while the
  // third client's upload is half-done.
  json job = bad_input_job();
  job["clients_per_round"] = 2;
  job["selection"]["overcommit"] = 1.5;
  std::vector<std::unique_ptr<Caller>> callers;
  for (int i = 0; i < 4; ++i) {
    Reply r = enroll.post("/v1/clients/register", {{"dataset_size", 200}});
    REQUIRE(r.status == 201);
    callers.push_back(std::make_unique<Caller>(port, r.body["token"].get<std::string>()));
  }
  REQUIRE(admin.post("/v1/admin/jobs", job).status == 201);
  std::vector<Invitee> invited;
  std::unique_ptr<Caller> outsider;
  for (auto& caller : callers) {
    Reply t = caller->get("/v1/task?wait=3");
    if (t.status == 200) {
      invited.push_back({std::move(caller), t.body});
    } else {
      outsider = std::move(caller);
    }
  }
  REQUIRE(invited.size() == 3);
  REQUIRE(outsider);
  const json& task = invited[0].task;
  CHECK(task["chunk_bytes"] == kChunk);
  const std::string uploads_url = task["uploads_url"];
  CHECK(uploads_url == "/v1/jobs/1/rounds/1/uploads");
  Reply model = invited[0].caller->get(task["model_url"]);
  REQUIRE(model.status == 200);
  const ModelBlob global = std::move(decode_blob(model.raw, 1 << 24)).value();
  std::vector<float> delta(global.data.size(), 0.0f);
  delta[0] = 0.5f;  // an update the committed model shows
  const std::string update = update_body(delta, 0, global.layout);
  REQUIRE(update.size() > 3 * kChunk);
  const std::string sha256 = sha256_hex(update);
  Caller& a = *invited[0].caller;
  Caller& b = *invited[1].caller;
  Caller& c = *invited[2].caller;

  // Openings that are refused change nothing.
  std::string before = store_snapshot(db);
  CHECK(a.call("POST", uploads_url, protocol::write_upload_open({update.size(), sha256}).dump(),
               {{"Content-Type", "application/json"}})
            .status == 400);  // no metadata
  CHECK(a.post(uploads_url, {{"bytes", 0}, {"sha256", sha256}}).status == 400);
  CHECK(open_session(a, uploads_url, std::string(2 << 20, 'x'), sha256).status == 413);
  Reply outsider_open = open_session(*outsider, uploads_url, update, sha256);
  CHECK(outsider_open.status == 410);
  CHECK(outsider_open.raw.find("not invited") != std::string::npos);
  CHECK(store_snapshot(db) == before);

  Reply opened = open_session(a, uploads_url, update, sha256);
  REQUIRE(opened.status == 201);
  const std::string url = opened.body["url"];
  CHECK(opened.body["received"] == 0);
  CHECK(opened.body["chunk_bytes"] == kChunk);
  CHECK(open_session(a, uploads_url, update, sha256).body["url"] == url);  // resumes it

  // Malformed chunks: each refused, none changes the store.
  before = store_snapshot(db);
  struct Bad {
    const char* what;
    std::function<Reply()> send;
    int status;
  };
  const std::vector<Bad> bad = {
      {"no Content-Range",
       [&] { return a.call("PUT", url, update.substr(0, kChunk), {}); }, 400},
      {"a malformed Content-Range", [&] { return put_chunk(a, url, update, 0, kChunk, "0-65535"); },
       400},
      {"a gap", [&] { return put_chunk(a, url, update, 2 * kChunk, kChunk); }, 409},
      {"a chunk off the grid", [&] { return put_chunk(a, url, update, 100, kChunk); }, 400},
      {"a short chunk", [&] { return put_chunk(a, url, update, 0, kChunk - 1); }, 400},
      {"another size of update",
       [&] {
         return put_chunk(a, url, update, 0, kChunk,
                          protocol::write_content_range({0, kChunk - 1, update.size() + 1}));
       },
       400},
      {"past the end",
       [&] {
         const size_t last = update.size() - 1;
         return put_chunk(a, url, update, 0, 1,
                          "bytes " + std::to_string(last + 1) + "-" + std::to_string(last + 1) +
                              "/" + std::to_string(update.size()));
       },
       400},
      {"a body longer than a chunk",
       [&] {
         return a.call("PUT", url, update.substr(0, kChunk + 1),
                       {{"Content-Range", protocol::write_content_range(
                                              {0, kChunk - 1, update.size()})}});
       },
       413},
      {"a body shorter than its range",
       [&] {
         return a.call("PUT", url, update.substr(0, kChunk - 1),
                       {{"Content-Range", protocol::write_content_range(
                                              {0, kChunk - 1, update.size()})}});
       },
       400},
      {"a chunk of another client's upload", [&] { return put_chunk(b, url, update, 0, kChunk); },
       404},
      {"another client asks where it stands", [&] { return b.get(url); }, 404},
      {"an unknown upload",
       [&] { return put_chunk(a, uploads_url + "/0123abcd", update, 0, kChunk); }, 404},
      {"the admin", [&] { return put_chunk(admin, url, update, 0, kChunk); }, 403},
  };
  for (const Bad& request : bad) {
    CAPTURE(request.what);
    Reply r = request.send();
    CHECK(r.status == request.status);
    CHECK(r.body.contains("error"));
    CHECK(store_snapshot(db) == before);
  }
  Reply first = put_chunk(a, url, update, 0, kChunk);
  REQUIRE(first.status == 200);
  CHECK(first.body["received"] == kChunk);
  before = store_snapshot(db);
  CHECK(put_chunk(a, url, update, 0, kChunk).body["received"] == kChunk);  // resent: the same
  std::string changed = update.substr(0, kChunk);
  changed[10] ^= 1;
  Reply differs = a.call("PUT", url, changed,
                         {{"Content-Range",
                           protocol::write_content_range({0, kChunk - 1, update.size()})}});
  CHECK(differs.status == 409);
  CHECK(store_snapshot(db) == before);
  CHECK(a.get(url).body["received"] == kChunk);

  // The rest, in order: the last chunk is answered as a plain upload.
  Reply last;
  for (size_t at = kChunk; at < update.size(); at += kChunk) {
    last = put_chunk(a, url, update, at, std::min(kChunk, update.size() - at));
    REQUIRE(last.status == 200);
  }
  CHECK(last.body["accepted"] == true);
  CHECK(last.body["updates"] == 1);
  CHECK(a.get(url).status == 404);  // the session is over
  CHECK(a.get("/v1/jobs/1/rounds/1/status").body["reason"] == "already uploaded");

  // An update whose bytes do not have the digest it was opened with is refused whole, and the
  // client may still send its update.
  before = store_snapshot(db);
  Reply wrong = open_session(b, uploads_url, update, sha256_hex("another update"));
  REQUIRE(wrong.status == 201);
  for (size_t at = 0; at < update.size(); at += kChunk) {
    last = put_chunk(b, wrong.body["url"], update, at, std::min(kChunk, update.size() - at));
  }
  CHECK(last.status == 422);
  CHECK(b.get("/v1/jobs/1/rounds/1/status").body["needed"] == true);
  CHECK(store_snapshot(db) == before);  // its session and chunks were stored, then dropped

  // Updates whose every chunk passes and that are refused whole, once read back from the spool
  // file: a norm over the bound though every chunk's part is under it, a header of another
  // model version, a blob whose checksum does not seal it. Each changes nothing.
  auto send_session = [&](Caller& caller, const std::string& body) {
    Reply session = open_session(caller, uploads_url, body, sha256_hex(body));
    REQUIRE(session.status == 201);
    Reply answer;
    for (size_t at = 0; at < body.size(); at += kChunk) {
      answer = put_chunk(caller, session.body["url"], body, at, std::min(kChunk, body.size() - at));
    }
    return answer;
  };
  std::vector<float> long_delta = delta;
  const size_t values_at = blob_values_offset(global.layout);
  REQUIRE(values_at < kChunk / 2);
  for (size_t chunk = 0; chunk < 3; ++chunk) {
    long_delta[(chunk * kChunk + kChunk / 2 - values_at) / 4] = 800;  // 800 < 1000 in each
  }
  std::string sealed_wrong = update;
  sealed_wrong.back() ^= 1;
  const struct {
    std::string what;
    std::string body;
    int status;
    const char* says;
  } refused_whole[] = {
      {"a norm over the bound", update_body(long_delta, 0, global.layout), 422,
       "exceeds the bound"},
      {"another model version", update_body(delta, 7, global.layout), 422,
       "trained on model version 7"},
      {"a checksum that does not seal it", sealed_wrong, 400, "checksum mismatch"},
  };
  for (const auto& refused : refused_whole) {
    CAPTURE(refused.what);
    before = store_snapshot(db);
    Reply answer = send_session(b, refused.body);
    CHECK(answer.status == refused.status);
    CHECK_MESSAGE(answer.raw.find(refused.says) != std::string::npos, answer.raw);
    CHECK(store_snapshot(db) == before);
    CHECK(b.get("/v1/jobs/1/rounds/1/status").body["needed"] == true);
  }

  // A value that is not finite is refused with the chunk that carries it, before the update is
  // whole: the session stands where it was.
  std::vector<float> poisoned_delta = delta;
  const size_t poisoned_at = (2 * kChunk + 100 - blob_values_offset(global.layout)) / 4;
  poisoned_delta[poisoned_at] = std::nanf("");
  const std::string poisoned = update_body(poisoned_delta, 0, global.layout);
  Reply bad_session = open_session(b, uploads_url, poisoned, sha256_hex(poisoned));
  REQUIRE(bad_session.status == 201);
  const std::string bad_url = bad_session.body["url"];
  REQUIRE(put_chunk(b, bad_url, poisoned, 0, kChunk).status == 200);
  REQUIRE(put_chunk(b, bad_url, poisoned, kChunk, kChunk).status == 200);
  before = store_snapshot(db);
  Reply nan_chunk = put_chunk(b, bad_url, poisoned, 2 * kChunk, kChunk);
  CHECK(nan_chunk.status == 422);
  CHECK_MESSAGE(nan_chunk.raw.find("update value " + std::to_string(poisoned_at) +
                                   " is not finite") != std::string::npos,
                nan_chunk.raw);
  CHECK(store_snapshot(db) == before);
  CHECK(b.get(bad_url).body["received"] == 2 * kChunk);

  // C's upload is half-done when B's update fills the round: its next chunk is told the
  // round no longer needs it, and nothing of it is left.
  Reply half = open_session(c, uploads_url, update, sha256);
  REQUIRE(half.status == 201);
  REQUIRE(put_chunk(c, half.body["url"], update, 0, kChunk).status == 200);
  CHECK(upload(b, task["upload_url"], update, good_update_meta()).status == 413);
  Reply right = open_session(b, uploads_url, update, sha256);
  REQUIRE(right.status == 201);
  for (size_t at = 0; at < update.size(); at += kChunk) {
    last = put_chunk(b, right.body["url"], update, at, std::min(kChunk, update.size() - at));
  }
  CHECK(last.body["accepted"] == true);
  // The job has one round: once it is finished, nothing more is written.
  REQUIRE(wait_until(
      [&] { return admin.get("/v1/admin/jobs/1").body.value("state", "") == "finished"; }, 60));
  const std::string committed = store_snapshot(db);
  const std::string half_url = half.body["url"];
  CHECK(committed.find(half_url.substr(half_url.rfind('/') + 1)) == std::string::npos);
  Reply late = put_chunk(c, half.body["url"], update, kChunk, kChunk);
  CHECK((late.status == 410 || late.status == 404));
  CHECK(store_snapshot(db) == committed);
  // Both updates were folded: the committed model moved by their mean.
  Reply next = admin.get("/v1/jobs/1/models/1");
  REQUIRE(next.status == 200);
  CHECK(decode_blob(next.raw, 1 << 24)->data[0] == doctest::Approx(global.data[0] + 0.5f));
}

TEST_CASE("behind a link that drops mid-body, models and chunked updates arrive whole") {
  TempDir dir;
  auto service = start_coordinator(
      dir, [](server::CoordinatorConfig& config) { config.upload_chunk_bytes = kChunk; });
  // The first three answers and the first three requests longer than 40 KB are cut there: the
  // MLP's model (about 400 KB) downloads and its updates (64 KB chunks) upload in several tries.
  CuttingProxy flaky(service->port(), 40 * 1024, 3, CuttingProxy::Direction::kBoth);
  Caller admin(service->port(), kAdminToken);
  REQUIRE(admin.post("/v1/admin/jobs", small_mlp_job("flaky-both-ways", 2)).status == 201);
  ml::Dataset slice = ml::head(fmnist_train(), 1200);
  auto fleet = client::Fleet::start(test_fleet(flaky.port(), 3, slice));
  REQUIRE(fleet.ok());
  json detail;
  const auto finished = finished_job(admin, 120, detail);
  (*fleet)->stop();
  REQUIRE_MESSAGE(finished, detail.dump());
  CHECK(committed_rounds(detail).size() == 2);
  CHECK((*fleet)->updates_accepted() == 6);
  CHECK(flaky.cuts_made() == 6);  // three downloads and three chunks were cut
  CHECK((*fleet)->download_resumes() == 3);  // each resumed at its byte
  // No byte went more than twice: a cut chunk is sent again (by the HTTP client's retry on a
  // fresh connection, or after asking the session where it stands), never the whole update;
  // a cut download goes on from its byte.
  Reply model = admin.get("/v1/jobs/1/models/0");
  REQUIRE(model.status == 200);
  const uint64_t bytes = model.raw.size();  // a float32 delta has the model's size
  MESSAGE("6 updates and 6 models of " << bytes << " bytes: " << flaky.request_bytes()
                                       << " bytes of requests, " << flaky.answer_bytes()
                                       << " of answers; chunk bytes sent "
                                       << (*fleet)->chunk_bytes_sent() << ", upload resumes "
                                       << (*fleet)->upload_resumes());
  CHECK((*fleet)->chunk_bytes_sent() >= 6 * bytes);
  CHECK(flaky.request_bytes() <= 2 * 6 * bytes);
  CHECK(flaky.answer_bytes() <= 2 * 6 * bytes);
}

TEST_CASE("a chunk cut off mid-body keeps its whole pieces, and the client goes on from there") {
  TempDir dir;
  constexpr size_t kPiece = 16 << 10;
  auto service = start_coordinator(dir, [](server::CoordinatorConfig& config) {
    config.upload_chunk_bytes = kChunk;
    config.upload_piece_bytes = kPiece;
  });
  const uint16_t port = service->port();
  Caller admin(port, kAdminToken);
  Caller enroll(port, kEnrollmentToken);
  Reply registered = enroll.post("/v1/clients/register", {{"dataset_size", 200}});
  REQUIRE(registered.status == 201);
  const std::string token = registered.body["token"];
  Caller client(port, token);
  json job = bad_input_job();
  job["clients_per_round"] = 1;
  REQUIRE(admin.post("/v1/admin/jobs", job).status == 201);
  Reply task = client.get("/v1/task?wait=3");
  REQUIRE(task.status == 200);
  Reply model = client.get(task.body["model_url"]);
  REQUIRE(model.status == 200);
  const ModelBlob global = std::move(decode_blob(model.raw, 1 << 24)).value();
  std::vector<float> delta(global.data.size(), 0.0f);
  delta[0] = 0.5f;
  const std::string update = update_body(delta, 0, global.layout);
  REQUIRE(update.size() > 4 * kChunk);
  Reply opened = open_session(client, task.body["uploads_url"], update, sha256_hex(update));
  REQUIRE(opened.status == 201);
  const std::string url = opened.body["url"];
  CHECK(opened.body["chunk_bytes"] == kChunk);

  // The first chunk's connection drops after 40 KB of its request: its first two pieces (32
  // KiB) arrived whole, and are kept.
  CuttingProxy flaky(port, 40 * 1024, 1, CuttingProxy::Direction::kBoth);
  Caller cut_off(flaky.port(), token);
  CHECK(put_chunk(cut_off, url, update, 0, kChunk).status == 0);
  CHECK(flaky.cuts_made() == 1);
  CHECK(wait_until([&] { return client.get(url).body.value("received", 0) == 2 * kPiece; }, 10));
  // Chunks go on from the piece the session holds up to; one resent from an earlier piece
  // must hold the same bytes there.
  Reply resumed = put_chunk(client, url, update, 2 * kPiece, kChunk);
  REQUIRE(resumed.status == 200);
  CHECK(resumed.body["received"] == 2 * kPiece + kChunk);
  CHECK(put_chunk(client, url, update, kPiece, kChunk).status == 200);
  std::string changed = update;
  changed[kPiece + 10] ^= 1;
  CHECK(put_chunk(client, url, changed, kPiece, kChunk).status == 409);
  CHECK(put_chunk(client, url, update, kPiece + 1, kChunk).status == 400);  // off a piece
  Reply last;
  for (size_t at = 2 * kPiece + kChunk; at < update.size(); at += kChunk) {
    last = put_chunk(client, url, update, at, std::min(kChunk, update.size() - at));
    REQUIRE(last.status == 200);
  }
  CHECK(last.body["accepted"] == true);
  // The update folded whole: the committed model moved by it.
  REQUIRE(wait_until(
      [&] { return admin.get("/v1/admin/jobs/1").body.value("state", "") == "finished"; }, 60));
  Reply next = admin.get("/v1/jobs/1/models/1");
  REQUIRE(next.status == 200);
  CHECK(decode_blob(next.raw, 1 << 24)->data[0] == doctest::Approx(global.data[0] + 0.5f));
}

TEST_CASE("a download cut more often than the SDK resumes in a row still completes, never anew") {
  TempDir dir;
  auto service = start_coordinator(dir);
  // Thirty cuts at 40 KB: each of the first downloads of the MLP's model (about 400 KB) is cut
  // about ten times, each time further along.
  CuttingProxy flaky(service->port(), 40 * 1024, 30);
  Caller admin(service->port(), kAdminToken);
  REQUIRE(admin.post("/v1/admin/jobs", small_mlp_job("cut-often", 2)).status == 201);
  ml::Dataset slice = ml::head(fmnist_train(), 1200);
  auto fleet = client::Fleet::start(test_fleet(flaky.port(), 3, slice));
  REQUIRE(fleet.ok());
  json detail;
  const auto finished = finished_job(admin, 120, detail);
  (*fleet)->stop();
  REQUIRE_MESSAGE(finished, detail.dump());
  CHECK(flaky.cuts_made() == 30);
  CHECK((*fleet)->download_resumes() == 30);
  // No download started over: six models' bytes, and little more (answers' headers, tasks).
  Reply model = admin.get("/v1/jobs/1/models/0");
  REQUIRE(model.status == 200);
  MESSAGE("answers " << flaky.answer_bytes() << " bytes for 6 models of " << model.raw.size());
  CHECK(flaky.answer_bytes() <= 6 * model.raw.size() * 11 / 10);
}
