// Fuzzes every wire message reader (protocol/), secure aggregation's included: the input is JSON
// text, as the coordinator and the SDK receive it (a request body, the X-Fedcase-Meta header, an
// answer), parsed with parse_untrusted_json (common/json_read.h) and given to each reader in turn.
// A reader must answer with a value or a Status, never throw; and a value it accepts must be
// accepted again once written, and written the same (what a reader accepts is valid). Numbers it
// accepts are finite, so the checks below hold for every accepted value.

#include <cmath>
#include <string>

#include "common/json_read.h"
#include "fuzz/fuzz_target.h"
#include "protocol/error_reply.h"
#include "protocol/eval_report.h"
#include "protocol/registration.h"
#include "protocol/secagg.h"
#include "protocol/task_offer.h"
#include "protocol/task_status.h"
#include "protocol/update_meta.h"

namespace {

using nlohmann::json;
namespace protocol = fedcase::protocol;

std::string text_of(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void check_finite(double x, const char* what) {
  if (!std::isfinite(x) || x < 0) fedcase::fuzz::fuzz_fail(what);
}

void check(const protocol::EvalReport& e) {
  if (e.samples == 0 || e.metrics.size() > protocol::kMaxEvalMetrics) {
    fedcase::fuzz::fuzz_fail("accepted a bad evaluation report");
  }
  check_finite(e.loss, "accepted a bad evaluation loss");
  for (const auto& [name, value] : e.metrics) {
    check_finite(value, "accepted a bad evaluation metric");
    if (name == "accuracy" && value > 1) fedcase::fuzz::fuzz_fail("accepted an accuracy above 1");
  }
}

void check(const protocol::UpdateMeta& m) {
  if (m.samples == 0) fedcase::fuzz::fuzz_fail("accepted metadata with samples == 0");
  for (double x : {m.loss_sum, m.loss_sq_sum, m.compute_s, m.io_s, m.download_s}) {
    check_finite(x, "accepted a bad metadata number");
  }
  if (m.evaluation) check(*m.evaluation);
}

void check(const protocol::TaskOffer& t) {
  if (!protocol::check_task_version(t.protocol_version).ok() || t.round == 0 || t.model.empty() ||
      t.model_url.empty() || t.model_url[0] != '/' || t.train.batch_size == 0 ||
      !(t.train.momentum < 1) || !(t.cache.repetition_factor >= 1)) {
    fedcase::fuzz::fuzz_fail("accepted a bad task offer");
  }
  for (double x : {t.deadline, t.expected_duration_s, t.train.lr, t.train.weight_decay,
                   t.train.prox_mu, t.cache.repetition_factor}) {
    check_finite(x, "accepted a bad task number");
  }
}

void check(const protocol::Registration& r) {
  for (double x :
       {r.device.compute_ms_per_sample, r.device.storage_read_bytes_per_s, r.device.sample_bytes}) {
    check_finite(x, "accepted a bad device measurement");
  }
  if (r.labels.size() > protocol::kMaxLabels) fedcase::fuzz::fuzz_fail("accepted 17 labels");
}

void check_key(const std::string& key) {
  if (key.size() != protocol::kSecAggKeyBytes) fedcase::fuzz::fuzz_fail("accepted a bad key");
}

void check_blob(const std::string& blob) {
  if (blob.empty() || blob.size() > protocol::kMaxSecAggBlobBytes) {
    fedcase::fuzz::fuzz_fail("accepted a bad ciphertext or share");
  }
}

void check(const protocol::SecAggParams& p) {
  if (p.threshold < 1 || p.threshold > p.degree || p.bits < 1 || p.bits > 64 || !(p.clip > 0) ||
      !(p.scale > 0) || p.max_weight < 1 || p.vector_length < 1 ||
      p.vector_length > protocol::kMaxSecAggVectorLength) {
    fedcase::fuzz::fuzz_fail("accepted bad secure-aggregation parameters");
  }
  check_finite(p.clip, "accepted a bad clip");
  check_finite(p.scale, "accepted a bad scale");
}

void check(const protocol::SecAggAdvertiseKeys& m) {
  if (m.round == 0) fedcase::fuzz::fuzz_fail("accepted round 0");
  check_key(m.cipher_public_key);
  check_key(m.mask_public_key);
}

void check(const protocol::SecAggGraph& m) {
  check(m.params);
  check_key(m.graph_seed);
  for (size_t i = 1; i < m.participants.size(); ++i) {
    if (m.participants[i - 1] >= m.participants[i]) {
      fedcase::fuzz::fuzz_fail("accepted participants out of order");
    }
  }
}

void check(const protocol::SecAggKeyList& m) {
  for (const auto& peer : m.neighbours) {
    check_key(peer.cipher_public_key);
    check_key(peer.mask_public_key);
  }
}

void check(const protocol::SecAggShares& m) {
  check_key(m.seed_commitment);
  for (const auto& c : m.shares) check_blob(c.ciphertext);
}

void check(const protocol::SecAggForwardedShares& m) {
  for (const auto& c : m.shares) check_blob(c.ciphertext);
}

void check(const protocol::SecAggMaskedInput& m) {
  if (m.word_bytes < 1 || m.word_bytes > 8 || m.words < 2) {
    fedcase::fuzz::fuzz_fail("accepted a bad masked input header");
  }
}

void check(const protocol::SecAggUnmaskResponse& m) {
  for (const auto* list : {&m.seed_shares, &m.key_shares}) {
    for (const auto& s : *list) check_blob(s.share);
  }
}

template <class T>
void check(const T&) {}

// Reads `doc` with `read`; a value it accepts must pass check() and read back the same once
// written.
template <class T>
void read_twice(const json& doc, fedcase::Result<T> (*read)(const json&), json (*write)(const T&)) {
  fedcase::Result<T> first = read(doc);
  if (!first.ok()) {
    if (first.status().message().empty()) fedcase::fuzz::fuzz_fail("an error without a message");
    return;
  }
  check(*first);
  fedcase::Result<T> again = read(write(*first));
  if (!again.ok()) fedcase::fuzz::fuzz_fail("accepted, but refused once written");
  if (text_of(write(*again)) != text_of(write(*first))) {
    fedcase::fuzz::fuzz_fail("accepted, but reads back different once written");
  }
}

fedcase::Result<protocol::EvalReport> read_report(const json& j) {
  return protocol::read_eval_report(j);
}
fedcase::Result<protocol::DeviceInfo> read_device(const json& j) {
  return protocol::read_device_info(j);
}
fedcase::Result<protocol::SecAggParams> read_params(const json& j) {
  return protocol::read_secagg_params(j);
}

fedcase::Result<protocol::SecAggTask> read_secure_task(const json& j) {
  return protocol::read_secagg_task(j);
}

}  // namespace

FEDCASE_FUZZ_TARGET(protocol) {
  auto doc = fedcase::parse_untrusted_json(fedcase::fuzz::as_text(data, size));
  if (!doc.ok()) return 0;
  try {
    read_twice(*doc, protocol::read_update_meta, protocol::write_update_meta);
    read_twice(*doc, read_report, protocol::write_eval_report);
    read_twice(*doc, protocol::read_task_offer, protocol::write_task_offer);
    read_twice(*doc, protocol::read_registration, protocol::write_registration);
    read_twice(*doc, read_device, protocol::write_device_info);
    read_twice(*doc, protocol::read_registration_reply, protocol::write_registration_reply);
    read_twice(*doc, protocol::read_task_status, protocol::write_task_status);
    read_twice(*doc, protocol::read_error_reply, protocol::write_error_reply);
    read_twice(*doc, read_params, protocol::write_secagg_params);
    read_twice(*doc, protocol::read_secagg_advertise_keys, protocol::write_secagg_advertise_keys);
    read_twice(*doc, protocol::read_secagg_graph, protocol::write_secagg_graph);
    read_twice(*doc, protocol::read_secagg_key_list, protocol::write_secagg_key_list);
    read_twice(*doc, protocol::read_secagg_keys, protocol::write_secagg_keys);
    read_twice(*doc, read_secure_task, protocol::write_secagg_task);
    read_twice(*doc, protocol::read_secagg_shares, protocol::write_secagg_shares);
    read_twice(*doc, protocol::read_secagg_forwarded_shares,
               protocol::write_secagg_forwarded_shares);
    read_twice(*doc, protocol::read_secagg_masked_input, protocol::write_secagg_masked_input);
    read_twice(*doc, protocol::read_secagg_unmask_request, protocol::write_secagg_unmask_request);
    read_twice(*doc, protocol::read_secagg_unmask_response, protocol::write_secagg_unmask_response);
  } catch (const std::exception& e) {
    fedcase::fuzz::fuzz_fail(std::string("a reader threw: ") + e.what());
  }
  return 0;
}
