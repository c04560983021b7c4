// kvdiag canary host program: launches one canary kernel once, with no Python.
//
// kvdiag builds one executable per canary when neither pycuda nor cupy is
// importable (nvcc is there whenever a CUDA build is):
//
//   nvcc -lineinfo -arch=sm_XX -I repro/canaries -DKVDIAG_KERNEL=oob_write \
//        -DKVDIAG_CANARY_SOURCE='"oob_write.cu"' -o oob_write canary_main.cu
//
// The canary is #included, so compute-sanitizer names its own file and line
// (oob_write.cu:15), exactly as with the cubin the Python launchers load.
// It does what kvdiag.controls.launch does: cudaMalloc exactly n floats for
// `in` and `out` (no pool), memset `in` unless told not to, launch, synchronise,
// copy `out` back, and print one JSON line saying what happened:
//
//   {"launcher": "nvcc-exe", "kernel": "oob_write", "ok": true, "checksum": 4950}
//
// Arguments: n bx by bz gx gy gz init_input(0|1). Exit 0 launched and
// synchronised, 1 a CUDA error, 2 bad arguments.

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include KVDIAG_CANARY_SOURCE

#define KVDIAG_STR2(x) #x
#define KVDIAG_STR(x) KVDIAG_STR2(x)

static int report(bool ok, const char *error, double checksum)
{
    if (ok) {
        printf("{\"launcher\": \"nvcc-exe\", \"kernel\": \"%s\", \"ok\": true, \"checksum\": %.6g}\n",
               KVDIAG_STR(KVDIAG_KERNEL), checksum);
    } else {
        printf("{\"launcher\": \"nvcc-exe\", \"kernel\": \"%s\", \"ok\": false, \"error\": \"%s\"}\n",
               KVDIAG_STR(KVDIAG_KERNEL), error);
    }
    fflush(stdout);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc != 9) {
        fprintf(stderr, "usage: %s n bx by bz gx gy gz init_input\n", argv[0]);
        return 2;
    }
    const int n = atoi(argv[1]);
    const dim3 block(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
    const dim3 grid(atoi(argv[5]), atoi(argv[6]), atoi(argv[7]));
    const bool init_input = atoi(argv[8]) != 0;
    if (n <= 0) {
        fprintf(stderr, "n must be positive\n");
        return 2;
    }
    const size_t nbytes = (size_t)n * sizeof(float);
    float *d_in = nullptr, *d_out = nullptr;
    cudaError_t err = cudaMalloc(&d_in, nbytes);
    if (err == cudaSuccess) err = cudaMalloc(&d_out, nbytes);
    if (err == cudaSuccess && init_input) err = cudaMemset(d_in, 0, nbytes);
    if (err == cudaSuccess) {
        KVDIAG_KERNEL<<<grid, block>>>(d_in, d_out, n);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    double checksum = 0.0;
    if (err == cudaSuccess) {
        float *host = (float *)malloc(nbytes);
        err = cudaMemcpy(host, d_out, nbytes, cudaMemcpyDeviceToHost);
        for (int i = 0; err == cudaSuccess && i < n; ++i) checksum += host[i];
        free(host);
    }
    const bool ok = err == cudaSuccess;
    const int code = report(ok, ok ? "" : cudaGetErrorString(err), checksum);
    cudaFree(d_in);
    cudaFree(d_out);
    return code;
}
