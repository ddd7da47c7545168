/*
 * acl_emu.h - test controls of acl-emu, the host-memory emulator of the
 * AscendCL memory ABI (built as libascendcl.so).
 *
 * The ACL types and prototypes come from the project's own declarations
 * (src/sys/acl_decls.h; put src/sys on the include path). The functions
 * below exist only in the emulator; resolve them with dlsym when the
 * library is loaded with dlopen. Device ids are validated: a bad one gives
 * ACL_ERROR_RT_INVALID_DEVICEID (107001); a NULL out-pointer gives
 * ACL_ERROR_INVALID_PARAM (100000).
 */
#ifndef ACL_EMU_H
#define ACL_EMU_H

#include <stddef.h>
#include <stdint.h>

#include "acl_decls.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ACL device synchronize call (not in acl_decls.h): finishes the queued
 * work of every stream of the current device and counts a sync. */
aclError aclrtSynchronizeDevice(void);

/* Later work on `stream` (NULL = the current device's default stream) stays
 * queued until released or synchronized. 0 on success. */
int32_t  aclemu_stream_hold(aclrtStream stream);      /* 0 on success */

/* Ends a hold: queued work on the stream completes (once any event it waits
 * for has completed). 0 on success. */
int32_t  aclemu_stream_release(aclrtStream stream);   /* queued work on the stream completes */

/* Runs one op on `stream` through its registered allocator, the way the
 * graph engine does: alloc + get_addr per size, overlap and pattern checks,
 * the op queued on the stream (pinning its blocks until it runs), then free
 * of every block. A NULL stream, or a stream that ran an op while nothing
 * was registered for it, uses the graph engine's own allocator for good.
 * 0; 100000 if the registration has no alloc-advise callback; 207001 if
 * alloc returned NULL; 507000 if blocks overlap or a pattern did not read
 * back. */
aclError aclemu_run_op(aclrtStream stream, const size_t *sizes, size_t n);

/* Queues an op on `stream` that uses the n device ranges, as a library's
 * kernel would (an emulated collective, which moves its data itself): the
 * op pins them until it runs, and launching it while another stream's
 * queued work uses one of them is a violation unless this stream waits for
 * that work. 0; 100000 for NULL spans with n > 0 or a range past the end of
 * the address space; 107000 if a range is not
 * device memory allocated or mapped now; 107017 for an unknown stream. */
typedef struct aclemu_span { const void *addr; size_t size; } aclemu_span;
aclError aclemu_launch(aclrtStream stream, const aclemu_span *spans, size_t n);

/* Makes the n-th next call of the ACL function named `function` (e.g.
 * "aclrtMalloc") fail without side effects: 207001 for aclrtMalloc,
 * aclrtMallocHost and aclrtMallocPhysical, NULL for aclrtAllocatorCreateDesc,
 * 507000 otherwise. Process-wide. 0, or -1 for an unknown name. */
int32_t  aclemu_fail_nth(const char *function, int32_t n);   /* n >= 1 arms, 0 disarms */

/* How many calls of `function` remain until its armed failure: n right after
 * aclemu_fail_nth(function, n), 0 once it fired or when nothing is armed.
 * Arming a large n and reading this back counts the calls a scenario makes.
 * -1 for an unknown or NULL name. */
int32_t  aclemu_fault_pending(const char *function);

/* How many times the ACL function named `function` was called so far:
 * in the whole process (aclemu_call_count) or on the calling thread
 * (aclemu_thread_call_count). Every call counts, failed and fault-refused
 * ones too. The counts only grow: measure with the difference of two
 * readings; fault injection (aclemu_fail_nth) leaves them alone. The
 * thread's count is 0 once the thread's own state is gone (a call from a
 * thread-local destructor at exit). -1 for an unknown or NULL name. */
int64_t  aclemu_call_count(const char *function);
int64_t  aclemu_thread_call_count(const char *function);

/* Sets the cost of every later call of the ACL function named `function`:
 * the call sleeps that long after its work, outside the emulator's locks,
 * so calls on different threads overlap. Calls already sleeping measure
 * again against the new cost. Also set by the environment variable
 * ACLEMU_COST (e.g. "device,aclrtMalloc=1ms"; see emu/README.md), read at
 * the first ACL call. 0, or -1 for an unknown or NULL name. */
int32_t  aclemu_set_cost(const char *function, uint64_t nanoseconds);

/* Violations recorded so far, process-wide: memory that queued work (an op
 * of aclemu_run_op, a queued 2D copy) still uses was written by another
 * stream, freed with aclrtFree or unmapped, or queued work ran on memory
 * no longer allocated or mapped. Each one also makes the next
 * aclrtSynchronizeStream / aclemu_stream_release of the streams involved
 * (and aclrtSynchronizeDevice of their device) return 507000. */
int64_t  aclemu_violations(void);

/* Non-zero: every later violation prints what happened and the stack of
 * the call that made it, then aborts the process (a test fails at the
 * call); 0: violations are only counted. The environment variable
 * ACLEMU_VIOLATIONS=abort sets the first; this call overrides it. Returns
 * the previous setting (1 aborting, 0 counting). */
int32_t  aclemu_set_violation_abort(int32_t abort);

/* The first `queries` aclrtQueryEventStatus calls after an event's work
 * completed still report NOT_READY (completion reported late, as in the
 * runtime's threaded mode); a synchronize covering the event ends it.
 * Applies to later records; 0 turns it off (the default, or
 * ACLEMU_EVENT_LAG). Always 0. */
int32_t  aclemu_set_event_lag(uint32_t queries);

/* The next `count` reservations above 512 MiB start one 2 MiB granule past a
 * 1 GiB boundary instead of at one (the runtime only documents its 2 MiB
 * granularity); smaller reservations are 2 MiB-aligned as always and do not
 * count. 0 turns it off. Process-wide. Always 0. */
int32_t  aclemu_misalign_reservations(uint32_t count);

typedef struct aclemu_usage {
  uint64_t malloc_bytes, malloc_count;       /* live aclrtMalloc memory */
  uint64_t physical_bytes, physical_count;   /* live aclrtMallocPhysical handles */
  uint64_t mapped_bytes, reserved_ranges;    /* live mappings and reserved address ranges */
  uint64_t streams, events, descs;           /* live streams, events, allocator descs */
  uint64_t syncs;                            /* stream/event/device synchronize calls so far */
} aclemu_usage;

/* Copies a device's usage counters into *out. 0 on success. */
int32_t  aclemu_get_usage(int32_t device, aclemu_usage *out);

/* Live aclrtMallocHost memory of the whole process (page-rounded bytes and
 * blocks). 0 on success. */
int32_t  aclemu_host_usage(uint64_t *bytes, uint64_t *count);

/* Sets a device's memory capacity in bytes; allowed below current usage
 * (later allocations then fail). 0 on success. */
int32_t  aclemu_set_device_memory(int32_t device, uint64_t bytes);

/* Stream capture (ACL graphs); aclmdlRICaptureGetInfo is in acl_decls.h.
 * Work submitted to a capturing stream is recorded into the model and runs
 * at each aclmdlRIExecuteAsync on the execute stream. mode: GLOBAL 0,
 * THREAD_LOCAL 1, RELAXED 2. Query, synchronize and destroy of a capturing
 * stream give 107027. */
aclError aclmdlRICaptureBegin(aclrtStream stream, uint32_t mode);
aclError aclmdlRICaptureEnd(aclrtStream stream, aclmdlRI *modelRI);
aclError aclmdlRICaptureThreadExchangeMode(uint32_t *mode);
aclError aclmdlRIExecuteAsync(aclmdlRI modelRI, aclrtStream stream);
aclError aclmdlRIDestroy(aclmdlRI modelRI);
/* How many aclrtSetDevice references the device has (each aclrtResetDevice
 * drops one; at 0 its primary context and streams go, and its memory once
 * no created context holds it); -1 for a device id that does not exist. */
int64_t  aclemu_device_refs(int32_t device);

#ifdef __cplusplus
}
#endif

#endif /* ACL_EMU_H */
