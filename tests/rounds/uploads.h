#pragma once
// Uploads for the round engine's tests: a two-parameter update of `value` in each parameter,
// admitted, folded and accepted the way the coordinator and the simulator do it.

#include <doctest/doctest.h>

#include "rounds/round.h"

namespace fedcase::rounds::testing {

// A report of `samples` samples with mean loss `mean_loss` and mean squared loss `mean_sq`.
inline scheduling::RoundReport report_of(uint64_t samples, double mean_loss, double mean_sq) {
  scheduling::RoundReport r;
  r.samples = samples;
  r.loss_sum = mean_loss * double(samples);
  r.loss_sq_sum = mean_sq * double(samples);
  return r;
}

// Reserves, folds and accepts `client`'s update at `at`, with its `evaluation` of the base
// model if any; returns its profile change.
inline ProfileChange upload(Round& round, ClientId client, double at, float value,
                            const scheduling::RoundReport& report,
                            std::optional<protocol::EvalReport> evaluation = std::nullopt) {
  auto aggregate = round.reserve(client, at);
  REQUIRE(aggregate.ok());
  const float delta[2] = {value, value};
  REQUIRE((*aggregate)->add(delta, 2, double(report.samples)).ok());
  return round.accept(client, report, at, 0, std::move(evaluation));
}

}  // namespace fedcase::rounds::testing
