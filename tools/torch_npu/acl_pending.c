/* The ACL answers the wrapper libascendcl.so still gives by hand because the
 * emulator does not export them yet. Each forwards to the emulator. Every
 * name here is a gap in the emulator, to be closed there (emu/README.md
 * lists what it implements); the wrapper's own stubs are for what no test
 * here can use (op compilation, HCCL, profiling, dump). */
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#define API __attribute__((visibility("default")))
#define ACL_ERROR_INVALID_PARAM 100000
typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;

/* the emulator's */
extern aclError aclrtSetDevice(int32_t);
extern aclError aclrtGetDevice(int32_t *);
extern aclError aclrtCreateStream(aclrtStream *);
extern aclError aclrtDestroyStream(aclrtStream);
extern aclError aclrtSynchronizeStream(aclrtStream);
extern aclError aclrtSynchronizeDevice(void);
extern aclError aclrtCreateEventWithFlag(aclrtEvent *, uint32_t);
extern aclError aclrtMalloc(void **, size_t, int);
extern aclError aclrtMemcpy2d(void *, size_t, const void *, size_t, size_t, size_t, int);
extern aclError aclrtMemcpy2dAsync(void *, size_t, const void *, size_t, size_t, size_t, int, aclrtStream);

static void *probe(void *arg) {
  uint32_t *n = arg;
  while (*n < 1024 && aclrtSetDevice((int32_t)*n) == 0) ++*n;
  return NULL;
}
API aclError aclrtGetDeviceCount(uint32_t *count) {
  if (!count) return ACL_ERROR_INVALID_PARAM;
  uint32_t n = 0;
  pthread_t t;
  pthread_create(&t, NULL, probe, &n);
  pthread_join(t, NULL);
  *count = n;
  return 0;
}
/* a context is the device id + 1 */
API aclError aclrtGetCurrentContext(aclrtContext *ctx) {
  int32_t d;
  aclError e = aclrtGetDevice(&d);
  if (e) return e;
  *ctx = (aclrtContext)(intptr_t)(d + 1);
  return 0;
}
API aclError aclrtSetCurrentContext(aclrtContext ctx) {
  if (!ctx) return ACL_ERROR_INVALID_PARAM;
  return aclrtSetDevice((int32_t)((intptr_t)ctx - 1));
}
API const char *aclrtGetSocName(void) { return "Ascend910B1"; }
API aclError aclrtCreateStreamWithConfig(aclrtStream *s, uint32_t priority, uint32_t flag) {
  (void)priority, (void)flag;
  return aclrtCreateStream(s);
}
API aclError aclrtDestroyStreamForce(aclrtStream s) { return aclrtDestroyStream(s); }
API aclError aclrtSynchronizeStreamWithTimeout(aclrtStream s, int32_t timeout) {
  (void)timeout;
  return aclrtSynchronizeStream(s);
}
API aclError aclrtSynchronizeDeviceWithTimeout(int32_t timeout) {
  (void)timeout;
  return aclrtSynchronizeDevice();
}
API aclError aclrtCreateEventExWithFlag(aclrtEvent *e, uint32_t flag) {
  return aclrtCreateEventWithFlag(e, flag ? flag : 0x1);
}
API aclError aclrtMallocAlign32(void **p, size_t size, int policy) { return aclrtMalloc(p, size, policy); }
API aclError aclrtMemcpy(void *dst, size_t max, const void *src, size_t n, int kind) {
  if (!n) return 0;
  if (n > max) return 107000;
  if (aclrtMemcpy2d(dst, n, src, n, n, 1, kind) == 0) return 0;
  memmove(dst, src, n);
  return 0;
}
API aclError aclrtMemcpyAsync(void *dst, size_t max, const void *src, size_t n, int kind, aclrtStream s) {
  if (!n) return 0;
  if (n > max) return 107000;
  return aclrtMemcpy2dAsync(dst, n, src, n, n, 1, kind, s);
}
API aclError aclrtMemset(void *p, size_t max, int32_t v, size_t n) {
  if (n > max) return 107000;
  memset(p, v, n);
  return 0;
}
API aclError aclrtMemsetAsync(void *p, size_t max, int32_t v, size_t n, aclrtStream s) {
  if (n > max) return 107000;
  aclError e = aclrtSynchronizeStream(s);
  if (e) return e;
  memset(p, v, n);
  return 0;
}
extern aclError aclrtMallocHost(void **, size_t);

API aclError aclrtCreateContext(aclrtContext *ctx, int32_t dev) {
  if (!ctx) return ACL_ERROR_INVALID_PARAM;
  aclError e = aclrtSetDevice(dev);
  if (!e) *ctx = (aclrtContext)(intptr_t)(dev + 1);
  return e;
}
API aclError aclrtDestroyContext(aclrtContext ctx) { return ctx ? 0 : ACL_ERROR_INVALID_PARAM; }
API aclError aclrtGetPrimaryCtxState(int32_t dev, uint32_t *flags, int32_t *active) {
  (void)dev;
  if (flags) *flags = 0;
  if (active) *active = 1;
  return 0;
}
API aclError aclrtSetDeviceSatMode(int mode) { return (void)mode, 0; }
API aclError aclrtGetDeviceSatMode(int *mode) {
  if (!mode) return ACL_ERROR_INVALID_PARAM;
  *mode = 1;
  return 0;
}
API aclError aclrtDeviceCanAccessPeer(int32_t *can, int32_t dev, int32_t peer) {
  (void)dev, (void)peer;
  if (!can) return ACL_ERROR_INVALID_PARAM;
  *can = 0;
  return 0;
}
API aclError aclrtSetOpWaitTimeout(uint32_t t) { return (void)t, 0; }
API aclError aclrtSetOpExecuteTimeOut(uint32_t t) { return (void)t, 0; }
API aclError aclrtSetOpExecuteTimeOutV2(uint64_t t, uint64_t *actual) {
  if (actual) *actual = t;
  return 0;
}
API aclError aclrtGetLastError(int level) { return (void)level, 0; }
API aclError aclrtPeekAtLastError(int level) { return (void)level, 0; }
API const char *aclGetRecentErrMsg(void) { return NULL; }
API aclError aclrtSetStreamFailureMode(aclrtStream s, uint64_t mode) { return (void)s, (void)mode, 0; }
API aclError aclrtSetStreamOverflowSwitch(aclrtStream s, uint32_t flag) { return (void)s, (void)flag, 0; }
API aclError aclrtGetStreamOverflowSwitch(aclrtStream s, uint32_t *flag) {
  (void)s;
  if (!flag) return ACL_ERROR_INVALID_PARAM;
  *flag = 0;
  return 0;
}
API aclError aclrtStreamGetId(aclrtStream s, int32_t *id) {
  if (!id) return ACL_ERROR_INVALID_PARAM;
  *id = (int32_t)((uintptr_t)s & 0x7fffffff);
  return 0;
}
API aclError aclrtMallocHostWithCfg(void **p, uint64_t size, void *cfg) {
  (void)cfg;
  return aclrtMallocHost(p, size);
}
API aclError aclGetCannAttribute(int attr, int32_t *value) {
  (void)attr;
  if (!value) return ACL_ERROR_INVALID_PARAM;
  *value = 1;
  return 0;
}
