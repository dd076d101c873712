// Fuzzes every wire message reader (protocol/): the input is JSON text, as the coordinator and
// the SDK receive it (a request body, the X-Fedcase-Meta header, an answer), parsed with
// parse_untrusted_json (common/json_read.h) and given to each reader in turn. A reader must
// answer with a value or a Status, never throw; and a value it accepts must be accepted again
// once written, and written the same (what a reader accepts is valid). Numbers it accepts are
// finite, so the checks below hold for every accepted value.

#include <cmath>
#include <string>

#include "common/json_read.h"
#include "fuzz/fuzz_target.h"
#include "protocol/error_reply.h"
#include "protocol/eval_report.h"
#include "protocol/registration.h"
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
  } catch (const std::exception& e) {
    fedcase::fuzz::fuzz_fail(std::string("a reader threw: ") + e.what());
  }
  return 0;
}
