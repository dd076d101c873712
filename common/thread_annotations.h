#pragma once
// Lock annotations: which mutex guards a member, which a function needs held. Clang's
// -Wthread-safety checks them where the mutex type is annotated; elsewhere they document.

#if defined(__clang__)
#define FEDCASE_GUARDED_BY(x) __attribute__((guarded_by(x)))
#define FEDCASE_REQUIRES(x) __attribute__((requires_capability(x)))
#else
#define FEDCASE_GUARDED_BY(x)
#define FEDCASE_REQUIRES(x)
#endif
