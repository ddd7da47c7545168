/* libacl_op_compiler.so: the compile options torch_npu's _npu_init sets and
 * reads. Setting one (ACL_ALLOW_HF32, ...) is accepted and has no effect: no
 * op is compiled in the emulator harness, so the JIT-compile option reads "disable"
 * (an aclGetCompileoptSize of 0 makes _npu_init fail). Op compilation is out
 * of reach of the emulator; every other function of this library is a stub
 * returning 207000. */
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#define API __attribute__((visibility("default")))
#define ACL_ERROR_INVALID_PARAM 100000
static const char jit_option[] = "disable";

static void note(const char *msg, int *seen) {
  if (__atomic_exchange_n(seen, 1, __ATOMIC_RELAXED)) return;
  (void)!write(2, msg, strlen(msg));
}

API size_t aclGetCompileoptSize(int option) {
  static int seen;
  note("[torch_npu harness] aclGetCompileoptSize: JIT compile \"disable\"\n", &seen);
  (void)option;
  return sizeof jit_option;
}

API int aclGetCompileopt(int option, char *value, size_t length) {
  (void)option;
  if (!value || length < sizeof jit_option) return ACL_ERROR_INVALID_PARAM;
  memcpy(value, jit_option, sizeof jit_option);
  return 0;
}

API int aclSetCompileopt(int option, const char *value) {
  (void)option;
  return value ? 0 : ACL_ERROR_INVALID_PARAM;
}
