/* A benchmark arm's shim: test-backend-ops processes fill their inputs on fewer threads.
 *
 * test-backend-ops fills every input tensor of every case with random numbers on
 * std::thread::hardware_concurrency() threads (one std::async each, tests/test-backend-ops.cpp's
 * init_tensor_uniform), and quantizes on half as many: on a 16-core host, dozens of threads are
 * created and joined for each case, however small its tensors. A scan's route phase runs thousands
 * of such cases bare, several processes at once, and its host time is what the question is about.
 * With this library preloaded (LD_PRELOAD) each process whose executable's name starts with
 * test-backend-ops (KVDIAG_INIT_THREADS_EXE to change it) gets KVDIAG_INIT_THREADS (default 1) from
 * hardware_concurrency(); every other process (kvdiag, compute-sanitizer) gets the real answer. The
 * values drawn are random either way; only the threads that draw them change. The first answer given
 * is appended to the file KVDIAG_INIT_THREADS_LOG names, never printed: the program's output stays
 * the parsers'.
 *
 *   cc -shared -fPIC -O2 -o init_threads.so benchmarks/shims/init_threads.c -ldl
 *
 * Written for kvdiag's benchmarks only; kvdiag itself never preloads anything.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef unsigned int (*concurrency_fn)(void);

static int is_target(void) {
    const char * want = getenv("KVDIAG_INIT_THREADS_EXE");
    if (want == NULL || *want == '\0') {
        want = "test-backend-ops";
    }
    return strncmp(program_invocation_short_name, want, strlen(want)) == 0;
}

static void note(unsigned int answer, int ours) {
    static int noted = 0;
    const char * path = getenv("KVDIAG_INIT_THREADS_LOG");
    if (noted || path == NULL || *path == '\0') {
        return;
    }
    noted = 1;
    FILE * log = fopen(path, "a");
    if (log != NULL) {
        fprintf(log, "pid %d %s: hardware_concurrency() = %u (%s)\n", (int) getpid(),
                program_invocation_short_name, answer, ours ? "the shim's" : "the library's");
        fclose(log);
    }
}

/* std::thread::hardware_concurrency(), as libstdc++ exports it. */
unsigned int _ZNSt6thread20hardware_concurrencyEv(void) {
    if (is_target()) {
        const char * value = getenv("KVDIAG_INIT_THREADS");
        long n = value != NULL && *value != '\0' ? strtol(value, NULL, 10) : 1;
        unsigned int answer = n >= 1 ? (unsigned int) n : 1u;
        note(answer, 1);
        return answer;
    }
    concurrency_fn real = (concurrency_fn) dlsym(RTLD_NEXT, "_ZNSt6thread20hardware_concurrencyEv");
    unsigned int answer = real != NULL ? real() : 0u;
    note(answer, 0);
    return answer;
}
