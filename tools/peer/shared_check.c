/* shared_check.c -- one process's view of the fake device, for test.sh's
   checks of FAKECUDA_SHARED (fakecudart_shared.h).

   usage: shared_check BYTES [hold|fork-hold]
     cudaMalloc(BYTES); prints "malloc ok|refused" and then "free F total T"
     from cudaMemGetInfo. With "hold", prints "held" after that and keeps the
     allocation until its standard input closes, then frees it and prints
     "freed" and cudaMemGetInfo again. "fork-hold" first forks a child that
     returns from exit(0) at once (its exit destructors run), waits for it,
     prints "child exited" and cudaMemGetInfo, then holds as "hold" does.
   Exit status: 0 when the calls ran (whatever the malloc's outcome), 1 when
   there is no device, 2 on bad arguments. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void print_info(void) {
  size_t free_b = 0, total = 0;
  cudaError_t e = cudaMemGetInfo(&free_b, &total);
  if (e != cudaSuccess)
    printf("meminfo error %d\n", (int)e);
  else
    printf("free %zu total %zu\n", free_b, total);
}

int main(int argc, char** argv) {
  char* end = NULL;
  unsigned long long bytes = argc > 1 ? strtoull(argv[1], &end, 0) : 0;
  int fork_first = argc > 2 && !strcmp(argv[2], "fork-hold");
  int hold = fork_first || (argc > 2 && !strcmp(argv[2], "hold"));
  if (argc < 2 || argc > 3 || !end || *end || bytes == 0 || (argc == 3 && !hold)) {
    fprintf(stderr, "usage: %s BYTES [hold|fork-hold]\n", argv[0]);
    return 2;
  }
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    printf("no device (%d)\n", (int)e);
    return 1;
  }
  void* p = NULL;
  e = cudaMalloc(&p, (size_t)bytes);
  printf("malloc %s\n", e == cudaSuccess ? "ok" : "refused");
  print_info();
  if (fork_first) {
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
      perror("fork");
      return 1;
    }
    if (child == 0) exit(0);
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) {
      fprintf(stderr, "the forked child did not exit normally\n");
      return 1;
    }
    printf("child exited\n");
    print_info();
  }
  if (hold) {
    printf("held\n");
    fflush(stdout);
    while (getchar() != EOF) {
    }
    if (p) cudaFree(p);
    printf("freed\n");
    print_info();
  }
  return 0;
}
