#pragma once
// Pace steering on the wire (docs/protocol.md, "Pace steering"): a task poll answered 204 (no
// task) carries, in its Fedcase-Check-In header, when the device should check in again and
// how it spreads its return after losing the coordinator:
//   Fedcase-Check-In: after=12.500, before=37.500, reconnect=30.000
// Seconds from the answer; a client that does not know the header polls again at once.
//
// Pure functions over plain values; thread-safe. Untrusted input gives a Status, never an
// exception.

#include <string>
#include <string_view>

#include "common/status.h"

namespace fedcase::protocol {

inline constexpr std::string_view kCheckInHeader = "Fedcase-Check-In";

struct CheckIn {
  double after_s = 0;      // check in again no sooner than this
  double before_s = 0;     // and no later: the device picks a point in between at random
  double reconnect_s = 0;  // after losing the coordinator, come back within this (at random)

  bool operator==(const CheckIn& o) const {
    return after_s == o.after_s && before_s == o.before_s && reconnect_s == o.reconnect_s;
  }
};

// The header's value, each number with three decimals (milliseconds).
std::string write_check_in(const CheckIn& check_in);
// Reads exactly "after=A, before=B, reconnect=R" (plain decimals, no sign or exponent):
// kInvalidArgument for anything else, or unless 0 <= A <= B <= 86400 and 0 <= R <= 86400.
Result<CheckIn> read_check_in(std::string_view value);

}  // namespace fedcase::protocol
