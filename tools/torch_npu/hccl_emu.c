/* An emulated HCCL for the torch_npu harness (never shipped): enough of
 * libhccl.so for torch.distributed's "hccl" backend to run across real
 * processes on one host, each with its own emulated device, and for tests to
 * see what torch_npu asks of HCCL (registration of its expandable segments
 * for zero copy, collectives on its streams). Without it the harness's stub
 * libhccl.so answers 207000 and torch_npu cannot create a communicator.
 *
 * How it works:
 * - Meeting. HcclGetRootInfo writes a magic, a version, a random token and
 *   the name of a POSIX shared-memory object into the 4108-byte root info
 *   (HC `include/hccl/hccl_types.h`: HCCL_ROOT_INFO_BYTES). The first rank
 *   to init creates the object (O_EXCL), the others open it; each claims its
 *   rank, and once all nRanks have joined every rank unlinks the name, so
 *   nothing stays in /dev/shm even if a process dies later. A rank that
 *   gives up (timeout) unlinks it too.
 * - Data. The object holds one staging slot per rank (HCCLEMU_CHUNK_BYTES,
 *   default 4 MiB, fixed when the object is made: it never grows, so no
 *   rank ever remaps under another). Each collective goes chunk by chunk:
 *   every rank copies its part into its slot, a barrier, every rank reads
 *   the slots it needs and writes its output, a barrier. Reductions run in
 *   rank order, so all ranks get the same bits. Device pointers are host
 *   addresses in the emulator, read and written directly.
 * - Barrier: a counter and a generation word in the object, futex-waited
 *   (process-shared). A wait ends with HCCL_E_TIMEOUT after
 *   HCCL_EXEC_TIMEOUT seconds (HCCL_CONNECT_TIMEOUT while joining), or
 *   HCCL_E_REMOTE as soon as a peer has destroyed the comm or exited; the
 *   failure is marked in the object (peers fail at once) and becomes the
 *   comm's async error (HcclGetCommAsyncError).
 * - Stream order. The emulated collective moves its data at launch, after
 *   the stream's earlier work: if the stream has queued work it is
 *   synchronized first (aclrtStreamQuery, aclrtSynchronizeStream); after the
 *   transfer the op is queued on the stream with the emulator's
 *   aclemu_launch, naming the buffers it used, so the emulator pins them
 *   until it runs and its violation checker sees the collective's use of
 *   them like any other op's. The ACL functions are looked up at run time
 *   (no link to libascendcl); without aclemu_launch that step is skipped,
 *   said once on stderr.
 * - Zero copy. The memory-range calls keep one process-wide table, as
 *   HCCL's ZeroCopyMemoryAgent does (its address manager is static, shared
 *   by every comm of the process). A collective whose buffers all lie in
 *   activated memory counts as zero copy, any other as staged (not an
 *   error, as in HCCL); hcclemu_counts reads the counts. The data path is
 *   the same either way.
 *
 * Rules and their sources: docs/runtime-behaviour.md, "HCCL as torch_npu
 * uses it (the emulated library)". HC = hicann/hcomm, PT = Ascend/pytorch
 * (torch_npu), as cited there. Every other HCCL function keeps the
 * generated stub (207000). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

/* HcclResult, HcclDataType, HcclReduceOp: HC `include/hccl/hccl_types.h`. */
typedef int HcclResult;
enum {
  HCCL_SUCCESS = 0, HCCL_E_PARA = 1, HCCL_E_PTR = 2, HCCL_E_MEMORY = 3, HCCL_E_INTERNAL = 4,
  HCCL_E_NOT_SUPPORT = 5, HCCL_E_SYSCALL = 8, HCCL_E_TIMEOUT = 9, HCCL_E_RUNTIME = 15, HCCL_E_REMOTE = 21,
};
enum {
  T_INT8 = 0, T_INT16 = 1, T_INT32 = 2, T_FP16 = 3, T_FP32 = 4, T_INT64 = 5, T_UINT64 = 6, T_UINT8 = 7,
  T_UINT16 = 8, T_UINT32 = 9, T_FP64 = 10, T_BFP16 = 11, T_INT128 = 12, T_HIF8 = 14, T_FP8E4M3 = 15,
  T_FP8E5M2 = 16, T_FP8E8M0 = 17,
};
enum { OP_SUM = 0, OP_PROD = 1, OP_MAX = 2, OP_MIN = 3 };
typedef void *HcclComm;
typedef void *aclrtStream;

#define ROOT_INFO_BYTES 4108
#define ROOT_MAGIC "hcclemu"
#define WIRE_VERSION 1
#define MAX_RANKS 64
#define NAME_BYTES 128            /* HcclGetCommName's buffer: PT MAX_GROUP_NAME_LEN */
#define DEFAULT_CHUNK (4u << 20)  /* per-rank staging slot */

/* What HcclGetRootInfo writes at the start of HcclRootInfo (the rest is 0). */
typedef struct {
  char magic[8];
  uint32_t version;
  uint32_t reserved;
  uint64_t token; /* random, never 0; also in the shared object's header */
  char shm_name[64];
} RootWire;
_Static_assert(sizeof(RootWire) <= ROOT_INFO_BYTES, "root info");

/* The shared object's header; the staging slots follow at HDR_BYTES. */
typedef struct {
  _Atomic uint32_t ready; /* 1 once the creator has filled in the rest */
  uint32_t version;
  uint64_t token;
  uint32_t nranks;
  uint32_t reserved;
  uint64_t slot_bytes;
  _Atomic uint32_t joined;     /* ranks that joined (futex word) */
  _Atomic uint32_t arrived;    /* ranks at the current barrier */
  _Atomic uint32_t generation; /* barriers completed (futex word) */
  _Atomic uint32_t failed;     /* HcclResult of the first rank that gave up, else 0 */
  _Atomic int32_t pid[MAX_RANKS];   /* the process of each joined rank, 0 while free */
  _Atomic uint32_t left[MAX_RANKS]; /* the rank destroyed its comm */
} ShmHeader;
#define HDR_BYTES 4096
_Static_assert(sizeof(ShmHeader) <= HDR_BYTES, "header");

typedef struct Comm {
  struct Comm *next; /* the process's live comms (g.comms) */
  uint32_t rank, nranks;
  char name[NAME_BYTES];
  ShmHeader *hdr;
  size_t map_bytes;
  unsigned char *slots;
  size_t slot_bytes;
  pthread_mutex_t op_lock; /* one collective at a time per comm */
  _Atomic int async_error;
  int users;     /* calls in flight (g.lock) */
  int destroyed; /* HcclCommDestroy ran; freed when users drops to 0 */
} Comm;

typedef struct { uintptr_t start, end; } Range;
typedef struct { Range *v; size_t n, cap; } Ranges;
typedef struct Registration {
  struct Registration *next;
  Comm *comm;
  uintptr_t addr;
  uint64_t size;
} Registration;

/* Process-wide state, all under g.lock. */
static struct {
  pthread_mutex_t lock;
  Comm *comms;
  int multi_rank_comms; /* live comms of more than one rank: they hold the zero-copy tables */
  Ranges set, active;   /* HcclCommSetMemoryRange ranges; activated memory */
  Registration *regs;   /* HcclCommRegister */
  uint64_t seq;         /* for shared-object names */
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};
static _Atomic uint64_t n_zero_copy, n_staged;

/* ---------------------------------------------------------------- helpers */

static void note(const char *msg) { (void)!write(2, msg, strlen(msg)); }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Seconds from env `var` (a positive number), else `fallback`. HCCL's own ranges
 * ([120, 7200] and [68, 17340]) are not enforced, so tests can wait briefly. */
static double timeout_s(const char *var, double fallback) {
  const char *s = getenv(var);
  char *end;
  double v = s ? strtod(s, &end) : 0;
  return (s && end != s && v > 0) ? v : fallback;
}
/* Defaults: CANN's environment variable reference (HCCL_CONNECT_TIMEOUT 120 s,
 * HCCL_EXEC_TIMEOUT 1800 s). */
#define CONNECT_TIMEOUT() timeout_s("HCCL_CONNECT_TIMEOUT", 120)
#define EXEC_TIMEOUT() timeout_s("HCCL_EXEC_TIMEOUT", 1800)

static void futex_wake(_Atomic uint32_t *word) { syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0); }

/* Marks the comm failed for every rank (the first failure wins) and wakes all waiters. */
static void fail_shared(ShmHeader *h, HcclResult err) {
  uint32_t none = 0;
  atomic_compare_exchange_strong(&h->failed, &none, (uint32_t)err);
  futex_wake(&h->generation);
  futex_wake(&h->joined);
}

/* Why a wait cannot end: the comm failed, or a peer left or exited. */
static HcclResult peers_gone(ShmHeader *h, uint32_t self) {
  uint32_t failed = atomic_load(&h->failed);
  if (failed) return (HcclResult)failed;
  for (uint32_t r = 0; r < h->nranks; r++) {
    if (r == self) continue;
    pid_t pid = atomic_load(&h->pid[r]);
    if (atomic_load(&h->left[r]) || (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)) return HCCL_E_REMOTE;
  }
  return HCCL_SUCCESS;
}

/* Waits until *word != old (futex, process-shared). HCCL_E_TIMEOUT at the deadline, or what
 * peers_gone says; either marks the comm failed. */
static HcclResult wait_change(ShmHeader *h, uint32_t self, _Atomic uint32_t *word, uint32_t old, double deadline) {
  for (int spin = 0; spin < 200; spin++)
    if (atomic_load(word) != old) return HCCL_SUCCESS;
  for (;;) {
    if (atomic_load(word) != old) return HCCL_SUCCESS;
    HcclResult err = peers_gone(h, self);
    if (!err && now_s() >= deadline) err = HCCL_E_TIMEOUT;
    if (err) {
      if (atomic_load(word) != old) return HCCL_SUCCESS; /* finished meanwhile */
      fail_shared(h, err);
      return err;
    }
    struct timespec ts = {0, 50 * 1000 * 1000};
    syscall(SYS_futex, word, FUTEX_WAIT, old, &ts, NULL, 0);
  }
}

/* All ranks of the comm meet. A rank reads the generation before it counts itself, and the
 * generation moves only once every rank has counted itself, so it cannot miss its barrier. */
static HcclResult barrier(Comm *c) {
  ShmHeader *h = c->hdr;
  if (atomic_load(&h->failed)) return (HcclResult)atomic_load(&h->failed);
  uint32_t gen = atomic_load(&h->generation);
  if (atomic_fetch_add(&h->arrived, 1) + 1 == c->nranks) {
    atomic_store(&h->arrived, 0);
    atomic_fetch_add(&h->generation, 1);
    futex_wake(&h->generation);
    return HCCL_SUCCESS;
  }
  HcclResult err = wait_change(h, c->rank, &h->generation, gen, now_s() + EXEC_TIMEOUT());
  if (err) atomic_store(&c->async_error, err);
  return err;
}

/* ------------------------------------------------------------ the comm table */

/* The live comm `comm`, held (users + 1) until comm_put; NULL if it is not one. */
static Comm *comm_get(HcclComm comm) {
  pthread_mutex_lock(&g.lock);
  Comm *c = g.comms;
  while (c && c != comm) c = c->next;
  if (c) c->users++;
  pthread_mutex_unlock(&g.lock);
  return c;
}

static void comm_free(Comm *c) {
  munmap(c->hdr, c->map_bytes);
  pthread_mutex_destroy(&c->op_lock);
  free(c);
}

static void comm_put(Comm *c) {
  pthread_mutex_lock(&g.lock);
  int last = --c->users == 0 && c->destroyed;
  pthread_mutex_unlock(&g.lock);
  if (last) comm_free(c);
}

/* NULL -> E_PTR, not a live comm -> E_PARA (an emulator choice: HCCL would crash). */
#define GET_COMM(c, comm)                  \
  if (!(comm)) return HCCL_E_PTR;          \
  Comm *c = comm_get(comm);                \
  if (!c) return HCCL_E_PARA;

/* -------------------------------------------------------- meeting: init */

API HcclResult HcclGetRootInfo(void *root_info) {
  if (!root_info) return HCCL_E_PTR;
  RootWire w;
  memset(&w, 0, sizeof w);
  memcpy(w.magic, ROOT_MAGIC, sizeof ROOT_MAGIC);
  w.version = WIRE_VERSION;
  while (w.token == 0)
    if (getrandom(&w.token, sizeof w.token, 0) != sizeof w.token)
      w.token = (uint64_t)(now_s() * 1e9) ^ ((uint64_t)getpid() << 32);
  pthread_mutex_lock(&g.lock);
  uint64_t seq = g.seq++;
  pthread_mutex_unlock(&g.lock);
  snprintf(w.shm_name, sizeof w.shm_name, "/hcclemu.%d.%llu.%016llx", (int)getpid(), (unsigned long long)seq,
           (unsigned long long)w.token);
  memset(root_info, 0, ROOT_INFO_BYTES);
  memcpy(root_info, &w, sizeof w);
  return HCCL_SUCCESS;
}

static size_t chunk_bytes(void) {
  const char *s = getenv("HCCLEMU_CHUNK_BYTES");
  unsigned long long v = s ? strtoull(s, NULL, 0) : 0;
  /* At least one 16-byte element per rank for reduce-scatter's sub-chunks. */
  if (v < 16 * MAX_RANKS || v > (1ull << 30)) v = DEFAULT_CHUNK;
  return (size_t)(v & ~63ull); /* whole elements of every type */
}

/* Creates the shared object, or opens the one another rank created and waits until it is
 * filled in. The mapping in *h / *bytes. */
static HcclResult open_shared(const RootWire *w, uint32_t nranks, double deadline, ShmHeader **h, size_t *bytes) {
  for (;;) {
    int fd = shm_open(w->shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) { /* the creator */
      size_t slot = chunk_bytes(), total = HDR_BYTES + (size_t)nranks * slot;
      void *p = MAP_FAILED;
      if (ftruncate(fd, (off_t)total) == 0) p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (p == MAP_FAILED) {
        shm_unlink(w->shm_name);
        return HCCL_E_SYSCALL;
      }
      ShmHeader *hd = p;
      hd->version = WIRE_VERSION;
      hd->token = w->token;
      hd->nranks = nranks;
      hd->slot_bytes = slot;
      atomic_store(&hd->ready, 1);
      *h = hd, *bytes = total;
      return HCCL_SUCCESS;
    }
    if (errno != EEXIST) return HCCL_E_SYSCALL;
    fd = shm_open(w->shm_name, O_RDWR, 0);
    if (fd < 0 && errno != ENOENT) return HCCL_E_SYSCALL;
    struct stat st = {0};
    while (fd >= 0 && fstat(fd, &st) == 0 && st.st_size == 0 && now_s() < deadline) usleep(1000);
    if (fd >= 0 && st.st_size >= HDR_BYTES) {
      void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (p == MAP_FAILED) return HCCL_E_SYSCALL;
      ShmHeader *hd = p;
      while (!atomic_load(&hd->ready) && now_s() < deadline) usleep(1000);
      if (!atomic_load(&hd->ready)) {
        munmap(p, (size_t)st.st_size);
        return HCCL_E_TIMEOUT;
      }
      *h = hd, *bytes = (size_t)st.st_size;
      return HCCL_SUCCESS;
    }
    if (fd >= 0) close(fd);
    /* Unlinked meanwhile (a rank gave up) or never sized: try again until the deadline. */
    if (now_s() >= deadline) return HCCL_E_TIMEOUT;
    usleep(1000);
  }
}

static HcclResult init_comm(uint32_t nranks, const void *root_info, uint32_t rank, const char *name, HcclComm *out) {
  if (!root_info || !out) return HCCL_E_PTR;
  RootWire w;
  memcpy(&w, root_info, sizeof w);
  /* Root info this library did not write, or not whole: refused (guess: HCCL_E_PARA). */
  if (memcmp(w.magic, ROOT_MAGIC, sizeof ROOT_MAGIC) != 0 || w.version != WIRE_VERSION || w.token == 0 ||
      memchr(w.shm_name, 0, sizeof w.shm_name) == NULL || strncmp(w.shm_name, "/hcclemu.", 9) != 0)
    return HCCL_E_PARA;
  if (nranks == 0 || nranks > MAX_RANKS || rank >= nranks) return HCCL_E_PARA;
  double deadline = now_s() + CONNECT_TIMEOUT();
  ShmHeader *h;
  size_t bytes;
  HcclResult err = open_shared(&w, nranks, deadline, &h, &bytes);
  if (err) {
    shm_unlink(w.shm_name);
    return err;
  }
  /* The object must be this root info's, made for as many ranks, and this rank still free. */
  int32_t free_slot = 0;
  if (h->token != w.token || h->version != WIRE_VERSION || h->nranks != nranks ||
      bytes != HDR_BYTES + (size_t)nranks * h->slot_bytes ||
      !atomic_compare_exchange_strong(&h->pid[rank], &free_slot, (int32_t)getpid())) {
    munmap(h, bytes);
    return HCCL_E_PARA;
  }
  atomic_fetch_add(&h->joined, 1);
  futex_wake(&h->joined);
  for (uint32_t j; (j = atomic_load(&h->joined)) < nranks && !err;) err = wait_change(h, rank, &h->joined, j, deadline);
  shm_unlink(w.shm_name); /* all met (or gave up): the name is no longer needed */
  if (err) {
    atomic_store(&h->left[rank], 1);
    munmap(h, bytes);
    return err;
  }
  Comm *c = calloc(1, sizeof *c);
  if (!c) {
    munmap(h, bytes);
    return HCCL_E_MEMORY;
  }
  c->rank = rank, c->nranks = nranks, c->hdr = h, c->map_bytes = bytes;
  c->slots = (unsigned char *)h + HDR_BYTES, c->slot_bytes = h->slot_bytes;
  pthread_mutex_init(&c->op_lock, NULL);
  if (name && name[0])
    snprintf(c->name, sizeof c->name, "%s", name);
  else /* the same on every rank */
    snprintf(c->name, sizeof c->name, "hcclemu_%016llx", (unsigned long long)w.token);
  pthread_mutex_lock(&g.lock);
  c->next = g.comms, g.comms = c;
  g.multi_rank_comms += nranks > 1;
  pthread_mutex_unlock(&g.lock);
  *out = c;
  return HCCL_SUCCESS;
}

API HcclResult HcclCommInitRootInfo(uint32_t nranks, const void *root_info, uint32_t rank, HcclComm *comm) {
  return init_comm(nranks, root_info, rank, NULL, comm);
}

/* HcclCommConfig: {size_t size; uint32 magicWord; uint32 version; uint64 reserved} then the
 * fields (PT third_party/hccl/inc/hccl/hccl_types.h), hcclCommName[128] at offset 32. HCCL
 * copies `size` bytes and checks the magic word first (HC `CommConfig::Load`,
 * `CommConfig::CheckMagicWord`: HCCL_E_PARA); the name counts from version 2
 * (`SetConfigByVersion`, `SetConfigCommName`). Only fields inside `size` are read here. */
#define CONFIG_MAGIC 0xf0f0f0f0u
#define CONFIG_NAME_AT 32
API HcclResult HcclCommInitRootInfoConfig(uint32_t nranks, const void *root_info, uint32_t rank, const void *config,
                                          HcclComm *comm) {
  if (!config) return HCCL_E_PTR;
  const unsigned char *p = config;
  size_t size;
  uint32_t magic, version;
  memcpy(&size, p, sizeof size);
  if (size < 16) return HCCL_E_PARA; /* guess: no room for the magic word */
  memcpy(&magic, p + 8, 4);
  memcpy(&version, p + 12, 4);
  if (magic != CONFIG_MAGIC) return HCCL_E_PARA;
  char name[NAME_BYTES] = "";
  if (version >= 2 && size >= CONFIG_NAME_AT + NAME_BYTES)
    memcpy(name, p + CONFIG_NAME_AT, strnlen((const char *)p + CONFIG_NAME_AT, NAME_BYTES - 1));
  return init_comm(nranks, root_info, rank, name, comm);
}

static void ranges_clear(Ranges *r) {
  free(r->v);
  memset(r, 0, sizeof *r);
}

API HcclResult HcclCommDestroy(HcclComm comm) {
  if (!comm) return HCCL_E_PTR;
  pthread_mutex_lock(&g.lock);
  Comm **pp = &g.comms;
  while (*pp && *pp != comm) pp = &(*pp)->next;
  Comm *c = *pp;
  if (!c) {
    pthread_mutex_unlock(&g.lock);
    return HCCL_E_PARA;
  }
  *pp = c->next;
  c->destroyed = 1;
  for (Registration **r = &g.regs; *r;) {
    if ((*r)->comm == c) {
      Registration *dead = *r;
      *r = dead->next;
      free(dead);
    } else {
      r = &(*r)->next;
    }
  }
  /* The zero-copy address manager goes with the last comm that holds it
   * (HC `ZeroCopyMemoryAgent::DeInit`: DecreCommRefCnt, reset at 0). */
  if (c->nranks > 1 && --g.multi_rank_comms == 0) {
    ranges_clear(&g.set);
    ranges_clear(&g.active);
  }
  /* Peers still waiting on this rank stop with HCCL_E_REMOTE instead of timing out. Told under
   * the lock: a user of the comm that finishes meanwhile frees it in comm_put, which takes the
   * lock first. */
  atomic_store(&c->hdr->left[c->rank], 1);
  futex_wake(&c->hdr->generation);
  int unused = c->users == 0;
  pthread_mutex_unlock(&g.lock);
  if (unused) comm_free(c);
  return HCCL_SUCCESS;
}

/* ------------------------------------------------------------ queries */

API HcclResult HcclGetRankSize(HcclComm comm, uint32_t *size) {
  if (!size) return HCCL_E_PTR;
  GET_COMM(c, comm);
  *size = c->nranks;
  comm_put(c);
  return HCCL_SUCCESS;
}

API HcclResult HcclGetRankId(HcclComm comm, uint32_t *rank) {
  if (!rank) return HCCL_E_PTR;
  GET_COMM(c, comm);
  *rank = c->rank;
  comm_put(c);
  return HCCL_SUCCESS;
}

/* The buffer is char[128] in torch_npu (PT ProcessGroupHCCL.cpp, MAX_GROUP_NAME_LEN). */
API HcclResult HcclGetCommName(HcclComm comm, char *name) {
  if (!name) return HCCL_E_PTR;
  GET_COMM(c, comm);
  snprintf(name, NAME_BYTES, "%s", c->name);
  comm_put(c);
  return HCCL_SUCCESS;
}

/* torch_npu's watchdog asks about every comm once a second (PT `Watchdog::runLoop`,
 * `HCCLComm::checkForHcclError`) from its own thread. */
API HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult *error) {
  if (!error) return HCCL_E_PTR;
  GET_COMM(c, comm);
  *error = atomic_load(&c->async_error);
  comm_put(c);
  return HCCL_SUCCESS;
}

API const char *HcclGetErrorString(HcclResult code) {
  static const char *const names[] = {
      "success", "parameter error", "empty pointer", "memory error", "internal error", "not supported",
      "not found", "unavailable", "system call error", "timeout", "open file failure", "tcp connect failure",
      "roce connect failure", "tcp transfer failure", "roce transfer failure", "runtime error", "driver error",
      "profiling error", "cce error", "network error", "try again", "error cqe", "suspending",
      "operation retry failure", "out of memory"};
  return code >= 0 && code < (int)(sizeof names / sizeof *names) ? names[code] : "unknown error";
}

/* isHcclFeatureSupported(x) is x < this (PT HCCLUtils). 3: BUFFER_SIZE (0), DETERMINISTIC (1)
 * and COMM_NAME (2), so torch_npu sends the group's name and keeps the config's full size. */
API uint32_t HcclGetCommConfigCapability(void) { return 3; }

/* HCCL_DETERMINISTIC: accepted; the reductions here are deterministic anyway. */
API HcclResult HcclSetConfig(int config, int32_t value) {
  (void)config, (void)value;
  return HCCL_SUCCESS;
}

API HcclResult HcclCommResume(HcclComm comm) {
  GET_COMM(c, comm);
  comm_put(c);
  return HCCL_SUCCESS;
}

/* ------------------------------------------------------------ zero copy */

static int ranges_add(Ranges *r, uintptr_t start, uintptr_t end) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 16;
    Range *v = realloc(r->v, cap * sizeof *v);
    if (!v) return 0;
    r->v = v, r->cap = cap;
  }
  r->v[r->n++] = (Range){start, end};
  return 1;
}

static void ranges_remove(Ranges *r, size_t i) { r->v[i] = r->v[--r->n]; }

/* The index of the range that contains [start, end) / that overlaps it / that starts at
 * start, or -1. */
static long range_containing(const Ranges *r, uintptr_t start, uintptr_t end) {
  for (size_t i = 0; i < r->n; i++)
    if (r->v[i].start <= start && end <= r->v[i].end) return (long)i;
  return -1;
}
static long range_overlapping(const Ranges *r, uintptr_t start, uintptr_t end) {
  for (size_t i = 0; i < r->n; i++)
    if (r->v[i].start < end && start < r->v[i].end) return (long)i;
  return -1;
}
static long range_at(const Ranges *r, uintptr_t start) {
  for (size_t i = 0; i < r->n; i++)
    if (r->v[i].start == start) return (long)i;
  return -1;
}

/* Whether [start, end) lies wholly in activated memory, across adjacent activations (an
 * expandable segment activates page by page): HC `ZeroCopyAddressMgr::IsActivateCommMemoryAddr`
 * walks successive activated ranges the same way. Under g.lock. */
static int activated(uintptr_t start, uintptr_t end) {
  while (start < end) {
    long i = range_overlapping(&g.active, start, start + 1);
    if (i < 0) return 0;
    start = g.active.v[i].end;
  }
  return 1;
}

/* A single-rank comm's memory calls succeed and record nothing (HC `ZeroCopyMemoryAgent`:
 * isSingleRank_). */
#define SINGLE_RANK_NOOP(c)  \
  if ((c)->nranks == 1) {    \
    comm_put(c);             \
    return HCCL_SUCCESS;     \
  }

/* HC `ZeroCopyAddressMgr::SetMemoryRange` / `AddLocalIpc2RemoteAddr`: size 0, a base already
 * set, or a range overlapping a set one: HCCL_E_PARA. alignment and flags are documented as
 * "only 0" but not checked, and torch_npu passes flags 1 (PT `ExpandableSegment::setHcclComm`). */
API HcclResult HcclCommSetMemoryRange(HcclComm comm, void *base, size_t size, size_t alignment, uint64_t flags) {
  (void)alignment, (void)flags;
  if (!base) return HCCL_E_PTR;
  GET_COMM(c, comm);
  SINGLE_RANK_NOOP(c);
  uintptr_t start = (uintptr_t)base, end = start + size;
  HcclResult err = HCCL_E_PARA;
  pthread_mutex_lock(&g.lock);
  if (size != 0 && end > start && range_overlapping(&g.set, start, end) < 0)
    err = ranges_add(&g.set, start, end) ? HCCL_SUCCESS : HCCL_E_MEMORY;
  pthread_mutex_unlock(&g.lock);
  comm_put(c);
  return err;
}

/* HC `ZeroCopyMemoryAgent::UnsetMemoryRange` ("is not set memory") and
 * `ZeroCopyAddressMgr::DelLocalIpc2RemoteAddr` ("still have activate memory"): HCCL_E_PARA. */
API HcclResult HcclCommUnsetMemoryRange(HcclComm comm, void *base) {
  if (!base) return HCCL_E_PTR;
  GET_COMM(c, comm);
  SINGLE_RANK_NOOP(c);
  HcclResult err = HCCL_E_PARA;
  pthread_mutex_lock(&g.lock);
  long i = range_at(&g.set, (uintptr_t)base);
  if (i >= 0 && range_overlapping(&g.active, g.set.v[i].start, g.set.v[i].end) < 0) {
    ranges_remove(&g.set, (size_t)i);
    err = HCCL_SUCCESS;
  }
  pthread_mutex_unlock(&g.lock);
  comm_put(c);
  return err;
}

/* HC `ZeroCopyMemoryAgent::ActivateCommMemory`: outside one set range ("not in set address
 * range") or overlapping activated memory: HCCL_E_PARA; `ZeroCopyAddressMgr::
 * ActivateCommMemoryAddr`: size 0, HCCL_E_PARA. offset and flags other than 0: HCCL_E_PARA,
 * the vendor document's "only 0" (the agent's code does not check them). */
API HcclResult HcclCommActivateCommMemory(HcclComm comm, void *va, size_t size, size_t offset, void *handle,
                                          uint64_t flags) {
  if (!va || !handle) return HCCL_E_PTR;
  GET_COMM(c, comm);
  SINGLE_RANK_NOOP(c);
  uintptr_t start = (uintptr_t)va, end = start + size;
  HcclResult err = HCCL_E_PARA;
  pthread_mutex_lock(&g.lock);
  if (size != 0 && end > start && offset == 0 && flags == 0 && range_containing(&g.set, start, end) >= 0 &&
      range_overlapping(&g.active, start, end) < 0)
    err = ranges_add(&g.active, start, end) ? HCCL_SUCCESS : HCCL_E_MEMORY;
  pthread_mutex_unlock(&g.lock);
  comm_put(c);
  return err;
}

/* HC `ZeroCopyAddressMgr::DeactivateCommMemoryAddr`: only the start of an activation
 * ("is not activate"): HCCL_E_PARA otherwise. */
API HcclResult HcclCommDeactivateCommMemory(HcclComm comm, void *va) {
  if (!va) return HCCL_E_PTR;
  GET_COMM(c, comm);
  SINGLE_RANK_NOOP(c);
  HcclResult err = HCCL_E_PARA;
  pthread_mutex_lock(&g.lock);
  long i = range_at(&g.active, (uintptr_t)va);
  if (i >= 0) {
    ranges_remove(&g.active, (size_t)i);
    err = HCCL_SUCCESS;
  }
  pthread_mutex_unlock(&g.lock);
  comm_put(c);
  return err;
}

/* A plain table of registered ranges (PT `windowRegisterAndExchange` registers one window);
 * the handle is the entry. Deregistering a handle the comm did not return: HCCL_E_PARA. */
API HcclResult HcclCommRegister(HcclComm comm, void *addr, uint64_t size, void **handle, uint32_t flag) {
  (void)flag;
  if (!addr || !handle) return HCCL_E_PTR;
  GET_COMM(c, comm);
  HcclResult err = HCCL_E_PARA;
  Registration *r = size ? malloc(sizeof *r) : NULL;
  if (size && !r) err = HCCL_E_MEMORY;
  if (r) {
    *r = (Registration){.comm = c, .addr = (uintptr_t)addr, .size = size};
    pthread_mutex_lock(&g.lock);
    r->next = g.regs, g.regs = r;
    pthread_mutex_unlock(&g.lock);
    *handle = r;
    err = HCCL_SUCCESS;
  }
  comm_put(c);
  return err;
}

API HcclResult HcclCommDeregister(HcclComm comm, void *handle) {
  if (!handle) return HCCL_E_PTR;
  GET_COMM(c, comm);
  HcclResult err = HCCL_E_PARA;
  pthread_mutex_lock(&g.lock);
  for (Registration **r = &g.regs; *r; r = &(*r)->next) {
    if (*r == handle && (*r)->comm == c) {
      Registration *dead = *r;
      *r = dead->next;
      free(dead);
      err = HCCL_SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&g.lock);
  comm_put(c);
  return err;
}

/* Test hooks: collectives of this process that ran zero copy (every buffer in activated
 * memory) and staged; bytes of activated memory now. */
API int hcclemu_counts(uint64_t *zero_copy, uint64_t *staged) {
  if (zero_copy) *zero_copy = atomic_load(&n_zero_copy);
  if (staged) *staged = atomic_load(&n_staged);
  return 0;
}

API int hcclemu_active_bytes(uint64_t *bytes) {
  if (!bytes) return -1;
  pthread_mutex_lock(&g.lock);
  uint64_t sum = 0;
  for (size_t i = 0; i < g.active.n; i++) sum += g.active.v[i].end - g.active.v[i].start;
  pthread_mutex_unlock(&g.lock);
  *bytes = sum;
  return 0;
}

/* ------------------------------------------------------------ stream order */

typedef struct { const void *addr; size_t size; } Span; /* the emulator's aclemu_span */
typedef int (*QueryFn)(aclrtStream, uint32_t *); /* aclrtStreamQuery: COMPLETE 0, NOT_READY 1 */
typedef int (*SyncFn)(aclrtStream);              /* aclrtSynchronizeStream */
typedef int (*LaunchFn)(aclrtStream, const Span *, size_t);
static struct {
  QueryFn query;
  SyncFn sync;
  LaunchFn launch;
} acl;
static pthread_once_t acl_once = PTHREAD_ONCE_INIT;

/* dlsym(RTLD_DEFAULT) searches the caller's scope, which holds libascendcl when torch_npu
 * loaded this library; the handle of an already loaded libascendcl.so is the fallback. */
static void *acl_symbol(const char *name) {
  void *p = dlsym(RTLD_DEFAULT, name);
  void *lib = p ? NULL : dlopen("libascendcl.so", RTLD_LAZY | RTLD_NOLOAD);
  if (lib) {
    p = dlsym(lib, name);
    dlclose(lib);
  }
  return p;
}

static void acl_resolve(void) {
  acl.query = (QueryFn)acl_symbol("aclrtStreamQuery");
  acl.sync = (SyncFn)acl_symbol("aclrtSynchronizeStream");
  acl.launch = (LaunchFn)acl_symbol("aclemu_launch");
  if (!acl.query || !acl.sync)
    note("hccl_emu: no aclrtStreamQuery/aclrtSynchronizeStream: collectives do not wait for their streams\n");
  if (!acl.launch)
    note("hccl_emu: no aclemu_launch: collectives are not queued on their streams (the emulator does not see "
         "their buffers in use)\n");
}

static HcclResult acl_failed(const char *call, int code) {
  char msg[128];
  snprintf(msg, sizeof msg, "hccl_emu: %s returned %d\n", call, code);
  note(msg);
  return HCCL_E_RUNTIME;
}

/* Before the transfer: the stream's earlier work. */
static HcclResult stream_before(aclrtStream stream) {
  pthread_once(&acl_once, acl_resolve);
  if (!acl.query || !acl.sync) return HCCL_SUCCESS;
  uint32_t status = 0;
  int rc = acl.query(stream, &status);
  if (rc) return acl_failed("aclrtStreamQuery", rc);
  if (status != 0 && (rc = acl.sync(stream)) != 0) return acl_failed("aclrtSynchronizeStream", rc);
  return HCCL_SUCCESS;
}

/* After the transfer: the op, queued on the stream with the buffers it used. */
static HcclResult stream_after(aclrtStream stream, const Span *spans, size_t n) {
  if (!acl.launch) return HCCL_SUCCESS;
  int rc = acl.launch(stream, spans, n);
  return rc ? acl_failed("aclemu_launch", rc) : HCCL_SUCCESS;
}

static void count_op(const Span *spans, size_t n) {
  int zero_copy = 1;
  pthread_mutex_lock(&g.lock);
  for (size_t i = 0; i < n; i++)
    zero_copy &= activated((uintptr_t)spans[i].addr, (uintptr_t)spans[i].addr + spans[i].size);
  pthread_mutex_unlock(&g.lock);
  atomic_fetch_add(zero_copy ? &n_zero_copy : &n_staged, 1);
}

/* ------------------------------------------------------------ reductions */

static size_t dtype_size(int t) {
  switch (t) {
    case T_INT8: case T_UINT8: case T_HIF8: case T_FP8E4M3: case T_FP8E5M2: case T_FP8E8M0: return 1;
    case T_INT16: case T_UINT16: case T_FP16: case T_BFP16: return 2;
    case T_INT32: case T_UINT32: case T_FP32: return 4;
    case T_INT64: case T_UINT64: case T_FP64: return 8;
    case T_INT128: return 16;
    default: return 0;
  }
}

/* SUM, PROD, MAX, MIN over INT8 ... BFP16; not INT128 or the 8-bit floats. */
static int reducible(int t, int op) { return op >= OP_SUM && op <= OP_MIN && t >= T_INT8 && t <= T_BFP16; }

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  float f;
  if (exp == 0) { /* zero or subnormal: man * 2^-24, exact */
    f = (float)man * 0x1p-24f;
    return sign ? -f : f;
  }
  bits = sign | (exp == 0x1f ? 0x7f800000 | (man << 13) : ((exp + 112) << 23) | (man << 13));
  memcpy(&f, &bits, 4);
  return f;
}

/* Round to nearest even. */
static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return (uint16_t)(sign | 0x7e00);  /* NaN */
  if (ax >= 0x47800000) return (uint16_t)(sign | 0x7c00); /* 65536 and above, inf */
  uint32_t e = ax >> 23, mant, shift;
  if (e >= 113) { /* normal half: rebias, keep 10 bits; a carry may reach inf, correctly */
    mant = ((e - 112) << 23) | (ax & 0x7fffff);
    shift = 13;
  } else { /* subnormal half, in units of 2^-24 */
    if (e < 102) return (uint16_t)sign;
    mant = (ax & 0x7fffff) | 0x800000;
    shift = 126 - e;
  }
  uint32_t h = mant >> shift, rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

static float bf16_to_f32(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

static double apply(int op, double x, double y) {
  switch (op) {
    case OP_SUM: return x + y;
    case OP_PROD: return x * y;
    case OP_MAX: return x > y ? x : y;
    default: return x < y ? x : y;
  }
}

/* Integers wrap (arithmetic in uint64_t, truncated: no signed overflow). */
#define INT_REDUCE(T)                                                            \
  {                                                                              \
    T *a = acc;                                                                  \
    const T *b = src;                                                            \
    for (size_t i = 0; i < n; i++) {                                             \
      T x = a[i], y = b[i];                                                      \
      a[i] = op == OP_SUM    ? (T)((uint64_t)x + (uint64_t)y)                    \
             : op == OP_PROD ? (T)((uint64_t)x * (uint64_t)y)                    \
             : op == OP_MAX  ? (x > y ? x : y)                                   \
                             : (x < y ? x : y);                                  \
    }                                                                            \
    return;                                                                      \
  }
#define FLOAT_REDUCE(T)                                                          \
  {                                                                              \
    T *a = acc;                                                                  \
    const T *b = src;                                                            \
    for (size_t i = 0; i < n; i++) a[i] = (T)apply(op, a[i], b[i]);              \
    return;                                                                      \
  }
#define HALF_REDUCE(to_f32, from_f32)                                            \
  {                                                                              \
    uint16_t *a = acc;                                                           \
    const uint16_t *b = src;                                                     \
    for (size_t i = 0; i < n; i++) a[i] = from_f32((float)apply(op, to_f32(a[i]), to_f32(b[i]))); \
    return;                                                                      \
  }

/* acc[i] = acc[i] op src[i] for n elements; the pair (dtype, op) is reducible. */
static void reduce_into(void *acc, const void *src, size_t n, int dtype, int op) {
  switch (dtype) {
    case T_INT8: INT_REDUCE(int8_t)
    case T_INT16: INT_REDUCE(int16_t)
    case T_INT32: INT_REDUCE(int32_t)
    case T_INT64: INT_REDUCE(int64_t)
    case T_UINT8: INT_REDUCE(uint8_t)
    case T_UINT16: INT_REDUCE(uint16_t)
    case T_UINT32: INT_REDUCE(uint32_t)
    case T_UINT64: INT_REDUCE(uint64_t)
    case T_FP32: FLOAT_REDUCE(float)
    case T_FP64: FLOAT_REDUCE(double)
    case T_FP16: HALF_REDUCE(f16_to_f32, f32_to_f16)
    case T_BFP16: HALF_REDUCE(bf16_to_f32, f32_to_bf16)
  }
}

/* ------------------------------------------------------------ collectives */

enum Kind { ALL_REDUCE, BROADCAST, ALL_GATHER, REDUCE_SCATTER, SEND, RECV, BARRIER };

typedef struct {
  enum Kind kind;
  unsigned char *send, *recv; /* recv only for BROADCAST (the buffer), RECV */
  uint64_t count;             /* elements: per rank for ALL_GATHER (in) and REDUCE_SCATTER (out) */
  int dtype, op;
  uint32_t peer; /* BROADCAST: root; SEND/RECV: the other rank */
} Op;

static unsigned char *slot(Comm *c, uint32_t r) { return c->slots + (size_t)r * c->slot_bytes; }

/* The data movement of one op, chunk by chunk; every rank runs the same number of chunks and
 * barriers. Outputs are written only after the chunk's inputs are in the slots, so in-place
 * ops (recv == send, or the usual per-rank offsets) read what they should. */
static HcclResult move(Comm *c, const Op *o) {
  size_t es = dtype_size(o->dtype), n = c->nranks, me = c->rank;
  /* reduce-scatter stages n sub-chunks per rank */
  size_t per = c->slot_bytes / es / (o->kind == REDUCE_SCATTER ? n : 1);
  HcclResult err = HCCL_SUCCESS;
  for (uint64_t off = 0; off < o->count && !err; off += per) {
    size_t k = (size_t)(o->count - off < per ? o->count - off : per), bytes = k * es;
    size_t at = (size_t)off * es;
    unsigned char *mine = slot(c, (uint32_t)me);
    switch (o->kind) { /* stage */
      case ALL_REDUCE: case ALL_GATHER: case SEND: memcpy(mine, o->send + at, bytes); break;
      case BROADCAST: if (me == o->peer) memcpy(mine, o->recv + at, bytes); break;
      case REDUCE_SCATTER:
        for (size_t j = 0; j < n; j++) memcpy(mine + j * bytes, o->send + (j * o->count + off) * es, bytes);
        break;
      default: break;
    }
    if ((err = barrier(c))) break;
    switch (o->kind) { /* read */
      case ALL_REDUCE:
        memcpy(o->recv + at, slot(c, 0), bytes);
        for (uint32_t r = 1; r < n; r++) reduce_into(o->recv + at, slot(c, r), k, o->dtype, o->op);
        break;
      case BROADCAST: if (me != o->peer) memcpy(o->recv + at, slot(c, o->peer), bytes); break;
      case ALL_GATHER:
        for (uint32_t r = 0; r < n; r++) memcpy(o->recv + (r * o->count + off) * es, slot(c, r), bytes);
        break;
      case REDUCE_SCATTER:
        memcpy(o->recv + at, slot(c, 0) + me * bytes, bytes);
        for (uint32_t r = 1; r < n; r++) reduce_into(o->recv + at, slot(c, r) + me * bytes, k, o->dtype, o->op);
        break;
      case RECV: memcpy(o->recv + at, slot(c, o->peer), bytes); break;
      default: break;
    }
    err = barrier(c);
  }
  return err;
}

/* Checks, stream order, data movement, the op queued on the stream, the count. */
static HcclResult run(HcclComm comm, aclrtStream stream, Op o) {
  GET_COMM(c, comm);
  size_t es = dtype_size(o.dtype), n = c->nranks;
  HcclResult err = HCCL_SUCCESS;
  if (o.kind != BARRIER && es == 0) err = HCCL_E_NOT_SUPPORT;
  else if ((o.kind == ALL_REDUCE || o.kind == REDUCE_SCATTER) && !reducible(o.dtype, o.op)) err = HCCL_E_NOT_SUPPORT;
  else if ((o.kind == SEND || o.kind == RECV) && n != 2) err = HCCL_E_NOT_SUPPORT; /* 2-rank p2p only */
  else if (o.peer >= n || ((o.kind == SEND || o.kind == RECV) && o.peer == c->rank)) err = HCCL_E_PARA;
  else if (o.count > (SIZE_MAX / 2) / n / (es ? es : 1)) err = HCCL_E_PARA;
  else if (o.count && ((!o.send && o.kind != BROADCAST && o.kind != RECV) || (!o.recv && o.kind != SEND)))
    err = HCCL_E_PTR;
  if (err || (o.count == 0 && o.kind != BARRIER)) {
    comm_put(c);
    return err;
  }
  size_t bytes = (size_t)o.count * es;
  Span spans[2];
  size_t ns = 0;
  switch (o.kind) {
    case ALL_REDUCE: spans[ns++] = (Span){o.send, bytes}; spans[ns++] = (Span){o.recv, bytes}; break;
    case BROADCAST: case RECV: spans[ns++] = (Span){o.recv, bytes}; break;
    case SEND: spans[ns++] = (Span){o.send, bytes}; break;
    case ALL_GATHER: spans[ns++] = (Span){o.send, bytes}; spans[ns++] = (Span){o.recv, bytes * n}; break;
    case REDUCE_SCATTER: spans[ns++] = (Span){o.send, bytes * n}; spans[ns++] = (Span){o.recv, bytes}; break;
    case BARRIER: break;
  }
  pthread_mutex_lock(&c->op_lock);
  err = (HcclResult)atomic_load(&c->hdr->failed);
  if (!err && (err = stream_before(stream)) != 0) fail_shared(c->hdr, err); /* peers must not wait for us */
  if (!err) err = o.kind == BARRIER ? barrier(c) : move(c, &o);
  if (err) atomic_store(&c->async_error, err);
  else err = stream_after(stream, spans, ns);
  pthread_mutex_unlock(&c->op_lock);
  if (!err && ns) count_op(spans, ns);
  comm_put(c);
  return err;
}

/* Signatures: HC `include/hccl/hccl_comm.h`, HL `include/hccl.h` (the collectives). */
API HcclResult HcclAllReduce(void *send, void *recv, uint64_t count, int dtype, int op, HcclComm comm,
                             aclrtStream stream) {
  return run(comm, stream, (Op){ALL_REDUCE, send, recv, count, dtype, op, 0});
}

API HcclResult HcclBroadcast(void *buf, uint64_t count, int dtype, uint32_t root, HcclComm comm, aclrtStream stream) {
  return run(comm, stream, (Op){BROADCAST, NULL, buf, count, dtype, OP_SUM, root});
}

API HcclResult HcclAllGather(void *send, void *recv, uint64_t send_count, int dtype, HcclComm comm,
                             aclrtStream stream) {
  return run(comm, stream, (Op){ALL_GATHER, send, recv, send_count, dtype, OP_SUM, 0});
}

API HcclResult HcclReduceScatter(void *send, void *recv, uint64_t recv_count, int dtype, int op, HcclComm comm,
                                 aclrtStream stream) {
  return run(comm, stream, (Op){REDUCE_SCATTER, send, recv, recv_count, dtype, op, 0});
}

API HcclResult HcclSend(void *send, uint64_t count, int dtype, uint32_t dest, HcclComm comm, aclrtStream stream) {
  return run(comm, stream, (Op){SEND, send, NULL, count, dtype, OP_SUM, dest});
}

API HcclResult HcclRecv(void *recv, uint64_t count, int dtype, uint32_t src, HcclComm comm, aclrtStream stream) {
  return run(comm, stream, (Op){RECV, NULL, recv, count, dtype, OP_SUM, src});
}

API HcclResult HcclBarrier(HcclComm comm, aclrtStream stream) {
  return run(comm, stream, (Op){BARRIER, NULL, NULL, 0, T_INT8, OP_SUM, 0});
}
