/* libcudart answers that make CUDA look absent: no device. torch is on PyPI
 * only as a CUDA build; with these, torch.cuda.is_available() is
 * False and torch_npu's check for a second accelerator passes. Every other
 * CUDA function is a generated stub that returns cudaErrorNoDevice (100). */
#include <stddef.h>
#define API __attribute__((visibility("default")))
enum { cudaSuccess = 0, cudaErrorNoDevice = 100 };
API int cudaGetDeviceCount(int *count) {
  if (count) *count = 0;
  return cudaErrorNoDevice;
}
API int cudaGetLastError(void) { return cudaSuccess; }
API int cudaPeekAtLastError(void) { return cudaSuccess; }
API int cudaRuntimeGetVersion(int *version) {
  if (version) *version = 13000;
  return cudaSuccess;
}
API int cudaDriverGetVersion(int *version) {
  if (version) *version = 0;
  return cudaSuccess;
}
API const char *cudaGetErrorString(int error) {
  (void)error;
  return "no CUDA device (CUDA is stubbed out in the emulator harness)";
}
API const char *cudaGetErrorName(int error) {
  (void)error;
  return "cudaErrorNoDevice";
}
