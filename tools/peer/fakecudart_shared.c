/* fakecudart_shared.c -- the fake device's capacity shared between processes
   (FAKECUDA_SHARED, described in fakecudart_shared.h; fakecudart.c describes
   the library). Without FAKECUDA_SHARED nothing here runs: g_shared stays
   NULL and charge() counts this process alone. */
#include <fcntl.h>
#include <sys/stat.h>

#include "fakecudart_internal.h"

_Static_assert(sizeof(struct fakecuda_shared) == 72,
               "the segment's layout is read by C and C++ alike");

_Atomic(struct fakecuda_shared*) g_shared = NULL;
/* The process that attached: a child made by fork() inherits the mapping and
   this process's used count, but its exit must not give the parent's memory
   back (shared_detach). */
static pid_t g_attached_pid;

/* Maps /<name> and checks its capacity against this process's; returns 0
   and says why on stderr when the device cannot be shared. */
int shared_attach(const char* name) {
  char path[256];
  if (!*name || strchr(name, '/') ||
      snprintf(path, sizeof path, "/%s", name) >= (int)sizeof path) {
    fprintf(stderr,
            "[fakecudart] FAKECUDA_SHARED=%s: a name of at most 254 "
            "characters without '/' is needed\n",
            name);
    return 0;
  }
  int fd = shm_open(path, O_RDWR | O_CREAT, 0600);
  if (fd < 0) {
    fprintf(stderr, "[fakecudart] FAKECUDA_SHARED: shm_open(%s): %s\n", path,
            strerror(errno));
    return 0;
  }
  /* Every process sizes it the same; a new segment reads as zeros. */
  struct stat st;
  if (fstat(fd, &st) || (st.st_size < (off_t)sizeof(struct fakecuda_shared) &&
                         ftruncate(fd, sizeof(struct fakecuda_shared)))) {
    fprintf(stderr, "[fakecudart] FAKECUDA_SHARED: sizing %s: %s\n", path,
            strerror(errno));
    close(fd);
    return 0;
  }
  void* m = mmap(NULL, sizeof(struct fakecuda_shared), PROT_READ | PROT_WRITE,
                 MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    fprintf(stderr, "[fakecudart] FAKECUDA_SHARED: mmap(%s): %s\n", path,
            strerror(errno));
    return 0;
  }
  struct fakecuda_shared* s = (struct fakecuda_shared*)m;
  uint64_t expected = 0;
  if (!atomic_compare_exchange_strong(&s->capacity, &expected,
                                      (uint64_t)g_capacity) &&
      expected != (uint64_t)g_capacity) {
    fprintf(stderr,
            "[fakecudart] FAKECUDA_SHARED=%s: the device holds %llu bytes, "
            "this process asks for %zu (FAKECUDA_MEM_BYTES / FAKECUDA_MEM_GIB "
            "must agree)\n",
            name, (unsigned long long)expected, g_capacity);
    munmap(m, sizeof(struct fakecuda_shared));
    return 0;
  }
  atomic_fetch_add(&s->attached, 1);
  g_attached_pid = getpid();
  atomic_store_explicit(&g_shared, s, memory_order_release);
  return 1;
}

int shared_charge(struct fakecuda_shared* s, size_t bytes) {
  uint64_t cur = atomic_load(&s->used);
  uint64_t cap = atomic_load(&s->capacity);
  do {
    if (cur + bytes > cap || cur + bytes < cur) return 0;
  } while (!atomic_compare_exchange_weak(&s->used, &cur, cur + bytes));
  uint64_t now = cur + bytes, pk = atomic_load(&s->peak);
  while (now > pk && !atomic_compare_exchange_weak(&s->peak, &pk, now)) {
  }
  return 1;
}

/* Never below zero: the count is the device's, not this process's. */
void shared_uncharge(struct fakecuda_shared* s, size_t bytes) {
  take_bytes(&s->used, bytes);
}

/* A process's device memory is the device's again when it exits, as with a
   real driver: what it still holds leaves the shared count at a normal exit
   (exit, return from main). _exit and crashes skip this: their bytes stay
   charged until the segment is removed. A child made by fork() shares the
   parent's bookkeeping (as CUDA, it must not use the parent's device
   memory): its exit leaves the count alone, so what it charged itself stays
   charged, as after _exit. */
__attribute__((destructor)) void shared_detach(void) {
  struct fakecuda_shared* s = shared_device();
  if (!s || getpid() != g_attached_pid) return;
  /* What is still held goes back, then later calls count in this process
     alone. A free racing with this took its bytes from g_used before the
     exchange (and gives them back itself) or finds nothing left to give
     (uncharge); a cudaMalloc racing with it may stay charged, as after
     _exit. */
  shared_uncharge(s, atomic_exchange(&g_used, 0));
  atomic_store_explicit(&g_shared, NULL, memory_order_release);
  atomic_fetch_sub(&s->attached, 1);
}

EXPORT struct fakecuda_shared* fakecuda_shared_device(void) {
  INIT();
  return shared_device();
}
