// Stages test-backend-ops' way of printing around real synccheck findings: for each
// argument `name=D` it runs one kernel, with a divergent __syncthreads() when D is 1
// (the pattern of repro/canaries/barrier_divergent.cu), waits for it, and only then
// prints `  FLASH_ATTN_EXT(name=D): ` (flushed, as ggml does) and `OK`. Ends with
// test-backend-ops' footer. Under compute-sanitizer --destroy-on-device-error kernel
// every case runs; the tool's report goes wherever its stdout goes.
#include <cstdio>
#include <cstring>

__global__ void kvdiag_case_kernel(float *out, int divergent) {
    __shared__ float tile[4][32];
    const int x = threadIdx.x, y = threadIdx.y;
    tile[y][x] = (float)(y * 32 + x);
    __syncthreads();
    if (divergent && y % 4 == 0) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[y * 32 + x] = tile[(y + 1) % 4][x];
}

int main(int argc, char **argv) {
    float *out = nullptr;
    cudaMalloc(&out, 128 * sizeof(float));
    printf("Testing 2 devices\n\nBackend 1/2: CUDA0\n");
    for (int i = 1; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        kvdiag_case_kernel<<<dim3(2), dim3(32, 4)>>>(out, eq && eq[1] == '1');
        cudaDeviceSynchronize();
        printf("  FLASH_ATTN_EXT(%s): ", argv[i]);
        fflush(stdout);
        printf("\033[1;32mOK\033[0m\n");
    }
    printf("  %d/%d tests passed\n  Backend CUDA0: OK\nBackend 2/2: CPU\n  Skipping\n2/2 backends passed\nOK\n",
           argc - 1, argc - 1);
    cudaFree(out);
    return 0;
}
