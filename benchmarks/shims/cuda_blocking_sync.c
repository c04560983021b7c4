/* A benchmark arm's shim: test-backend-ops processes wait for the GPU asleep instead of spinning.
 *
 * CUDA's default schedule (cudaDeviceScheduleAuto) spins a host thread while it waits for the GPU
 * when the process has fewer contexts than the machine has cores, so a process waiting for its
 * kernels looks as busy on the host as one computing. benchmarks/bench_discover.py's arms ask whether
 * the host or the GPU binds a discovery; with this library preloaded (LD_PRELOAD) each process whose
 * executable's name starts with test-backend-ops (KVDIAG_BLOCKING_SYNC_EXE to change it) sets
 * CU_CTX_SCHED_BLOCKING_SYNC on every device's primary context before ggml creates it, and every
 * other process (kvdiag, compute-sanitizer) is left alone. What it did, or why not, is appended to
 * the file KVDIAG_BLOCKING_SYNC_LOG names, never printed: the program's output stays the parsers'.
 *
 *   cc -shared -fPIC -O2 -o cuda_blocking_sync.so benchmarks/shims/cuda_blocking_sync.c -ldl
 *
 * Written for kvdiag's benchmarks only; kvdiag itself never preloads anything.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CU_CTX_SCHED_BLOCKING_SYNC 0x04u

typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_flags_fn)(int, unsigned int);

static void note(const char * what, int device, int status) {
    const char * path = getenv("KVDIAG_BLOCKING_SYNC_LOG");
    FILE * log = path ? fopen(path, "a") : NULL;
    if (log) {
        fprintf(log, "%ld %s device=%d status=%d\n", (long) getpid(), what, device, status);
        fclose(log);
    }
}

__attribute__((constructor)) static void kvdiag_blocking_sync(void) {
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        return;
    }
    exe[n] = '\0';
    const char * base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    const char * wanted = getenv("KVDIAG_BLOCKING_SYNC_EXE");
    wanted = wanted ? wanted : "test-backend-ops";
    if (strncmp(base, wanted, strlen(wanted)) != 0) {
        return;
    }
    void * cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    cu_init_fn init = cuda ? (cu_init_fn) dlsym(cuda, "cuInit") : NULL;
    cu_count_fn count = cuda ? (cu_count_fn) dlsym(cuda, "cuDeviceGetCount") : NULL;
    cu_get_fn get = cuda ? (cu_get_fn) dlsym(cuda, "cuDeviceGet") : NULL;
    cu_flags_fn set = cuda ? (cu_flags_fn) dlsym(cuda, "cuDevicePrimaryCtxSetFlags_v2") : NULL;
    if (!init || !count || !get || !set) {
        note("no-driver-entry-points", -1, -1);
        return;
    }
    int status = init(0);
    if (status != 0) {
        note("cuInit-failed", -1, status);
        return;
    }
    int devices = 0;
    status = count(&devices);
    if (status != 0) {
        note("cuDeviceGetCount-failed", -1, status);
        return;
    }
    for (int i = 0; i < devices; i++) {
        int device = 0;
        status = get(&device, i);
        if (status == 0) {
            status = set(device, CU_CTX_SCHED_BLOCKING_SYNC);
        }
        note("blocking-sync", i, status);
    }
}
