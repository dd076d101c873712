#pragma once
// Crash points, for crash tests: a process started with FEDCASE_CRASH_AT=<name> kills itself
// (SIGKILL: no destructor, no flush, as a power cut or the OOM killer would) the first time it
// passes crash_point("<name>"), and with FEDCASE_CRASH_AT=<name>@<n> the n-th time. A test
// can so stop a coordinator between two exact steps of a round (docs/scaling.md, "Crash
// points" lists them). Without the variable, a crash point costs a look at an empty name.
//
// Thread safety: any thread.

namespace fedcase {

void crash_point(const char* name);

}  // namespace fedcase
