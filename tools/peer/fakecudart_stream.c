/* fakecudart_stream.c -- the fake CUDA runtime's streams and events: all work
   completes at once (fakecudart.c describes the library). */
#include "fakecudart_internal.h"

static __thread enum cudaStreamCaptureMode t_capture_mode =
    cudaStreamCaptureModeGlobal;


/* ------------------------------------------------------------------------ */
/* streams and events: everything completes immediately                       */
/* ------------------------------------------------------------------------ */

struct CUstream_st {
  unsigned magic;
  unsigned flags;
  int priority;
  int device;
  unsigned long long id;
};
static _Atomic unsigned long long g_next_stream_id = 16;
struct CUevent_st {
  unsigned magic;
  unsigned flags;
  uint64_t recorded_ns;
};
#define STREAM_MAGIC 0x57AEA3u
#define EVENT_MAGIC 0xE7E47u

EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s,
                                                unsigned int flags,
                                                int priority) {
  if (!s) return set_err(cudaErrorInvalidValue);
  struct CUstream_st* st = (struct CUstream_st*)calloc(1, sizeof *st);
  st->magic = STREAM_MAGIC;
  st->flags = flags;
  st->priority = priority;
  st->device = t_device;
  st->id = atomic_fetch_add(&g_next_stream_id, 1);
  *s = st;
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s,
                                             unsigned int flags) {
  return cudaStreamCreateWithPriority(s, flags, 0);
}
EXPORT cudaError_t cudaStreamCreate(cudaStream_t* s) {
  return cudaStreamCreateWithPriority(s, 0, 0);
}
static int is_user_stream(cudaStream_t s) {
  /* 0, cudaStreamLegacy (0x1), cudaStreamPerThread (0x2) are builtin */
  return (uintptr_t)s > 0x2 && ((struct CUstream_st*)s)->magic == STREAM_MAGIC;
}
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (is_user_stream(s)) {
    s->magic = 0;
    free(s);
  }
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamQuery(cudaStream_t s) {
  (void)s;
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  (void)s;
  INIT();
  atomic_fetch_add(&g_sync_calls, 1);
  spin_ns(g_sync_ns);
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e,
                                       unsigned int flags) {
  (void)s;
  (void)e;
  (void)flags;
  spin_ns(g_event_ns);
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t s, int* priority) {
  if (!priority) return set_err(cudaErrorInvalidValue);
  *priority = is_user_stream(s) ? s->priority : 0;
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned int* flags) {
  if (!flags) return set_err(cudaErrorInvalidValue);
  *flags = is_user_stream(s) ? s->flags : 0;
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamGetDevice(cudaStream_t s, int* device) {
  if (!device) return set_err(cudaErrorInvalidValue);
  *device = is_user_stream(s) ? s->device : t_device;
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long* id) {
  if (!id) return set_err(cudaErrorInvalidValue);
  if (is_user_stream(s))
    *id = s->id;
  else if (s == cudaStreamPerThread)
    *id = 2; /* a real runtime has one per thread; single-threaded harness */
  else
    *id = 1; /* NULL stream and cudaStreamLegacy are the same stream */
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s,
                                         enum cudaStreamCaptureStatus* st) {
  (void)s;
  if (!st) return set_err(cudaErrorInvalidValue);
  *st = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamGetCaptureInfo(
    cudaStream_t s, enum cudaStreamCaptureStatus* status,
    unsigned long long* id, cudaGraph_t* graph,
    const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges,
    size_t* ndeps) {
  (void)s;
  if (!status) return set_err(cudaErrorInvalidValue);
  *status = cudaStreamCaptureStatusNone;
  if (id) *id = 0;
  if (graph) *graph = NULL;
  if (deps) *deps = NULL;
  if (edges) *edges = NULL;
  if (ndeps) *ndeps = 0;
  return cudaSuccess;
}
EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(
    enum cudaStreamCaptureMode* mode) {
  if (!mode) return set_err(cudaErrorInvalidValue);
  enum cudaStreamCaptureMode old = t_capture_mode;
  t_capture_mode = *mode;
  *mode = old;
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e,
                                            unsigned int flags) {
  if (!e) return set_err(cudaErrorInvalidValue);
  struct CUevent_st* ev = (struct CUevent_st*)calloc(1, sizeof *ev);
  ev->magic = EVENT_MAGIC;
  ev->flags = flags;
  *e = ev;
  atomic_fetch_add(&g_event_create_calls, 1);
  return cudaSuccess;
}
EXPORT cudaError_t cudaEventCreate(cudaEvent_t* e) {
  return cudaEventCreateWithFlags(e, 0);
}
EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return set_err(cudaErrorInvalidResourceHandle);
  e->magic = 0;
  free(e);
  return cudaSuccess;
}
EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  (void)s;
  if (!e) return set_err(cudaErrorInvalidResourceHandle);
  atomic_fetch_add(&g_event_record_calls, 1);
  spin_ns(g_event_ns);
  if (!(e->flags & cudaEventDisableTiming)) e->recorded_ns = now_ns();
  return cudaSuccess;
}
EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s,
                                            unsigned int flags) {
  (void)flags;
  return cudaEventRecord(e, s);
}
EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) {
  (void)e;
  atomic_fetch_add(&g_event_query_calls, 1);
  return cudaSuccess;
}
EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  (void)e;
  spin_ns(g_sync_ns);
  return cudaSuccess;
}
EXPORT cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a,
                                        cudaEvent_t b) {
  if (!ms || !a || !b) return set_err(cudaErrorInvalidValue);
  if ((a->flags | b->flags) & cudaEventDisableTiming)
    return set_err(cudaErrorInvalidResourceHandle);
  *ms = (float)((double)((int64_t)(b->recorded_ns - a->recorded_ns)) / 1e6);
  return cudaSuccess;
}
