/* shared_exit_check.c -- a free after the fake runtime has left the shared
   device at exit, for test-shared.sh. Linked with the fake runtime's sources
   (not its library) so that it can call the exit destructor, shared_detach,
   where a late free would follow it: a thread freeing while the process
   exits, or another library's destructor.

   usage: FAKECUDA_SHARED=<name> shared_exit_check BYTES
     cudaMalloc(BYTES), shared_detach(), cudaFree; then prints
     "used U shared S": this process's used bytes (fakecuda_get_stats) and
     the device's (read from the segment). Both must be 0: the detach gave
     the block's bytes back, and the free finds nothing left to give.
   Exit status: 0 when the calls ran, 1 otherwise, 2 on bad arguments. */
#include <stdlib.h>

#include "fakecudart_internal.h"

void fakecuda_get_stats(struct fakecuda_stats* s);
struct fakecuda_shared* fakecuda_shared_device(void);

int main(int argc, char** argv) {
  char* end = NULL;
  unsigned long long bytes = argc == 2 ? strtoull(argv[1], &end, 0) : 0;
  if (argc != 2 || !end || *end || bytes == 0) {
    fprintf(stderr, "usage: FAKECUDA_SHARED=<name> %s BYTES\n", argv[0]);
    return 2;
  }
  struct fakecuda_shared* dev = fakecuda_shared_device();
  void* p = NULL;
  if (!dev || cudaMalloc(&p, (size_t)bytes) != cudaSuccess) {
    fprintf(stderr, "no shared device, or the cudaMalloc failed\n");
    return 1;
  }
  shared_detach();
  if (cudaFree(p) != cudaSuccess) {
    fprintf(stderr, "cudaFree failed\n");
    return 1;
  }
  struct fakecuda_stats st;
  fakecuda_get_stats(&st);
  printf("used %llu shared %llu\n", (unsigned long long)st.used_bytes,
         (unsigned long long)atomic_load(&dev->used));
  return 0;
}
