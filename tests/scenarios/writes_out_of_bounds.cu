// One kernel writes one int past the end of a 32-int device buffer (a defect
// only compute-sanitizer memcheck sees: the allocation granularity hides it from
// the hardware), one kernel stays in bounds. Prints the result of the final
// synchronisation; exits 0 when CUDA reported no error, 1 otherwise.
#include <cstdio>

__global__ void kvdiag_oob_write(int *buf, int n) {
    int i = threadIdx.x;
    buf[i + 1] = i;          // thread n-1 writes buf[n]: 4 bytes past the end
    (void)n;
}

__global__ void kvdiag_in_bounds(int *buf, int n) {
    int i = threadIdx.x;
    if (i < n) buf[i] = i;
}

int main() {
    const int n = 32;
    int *d = nullptr;
    if (cudaMalloc(&d, n * sizeof(int)) != cudaSuccess) {
        printf("cudaMalloc failed\n");
        return 2;
    }
    kvdiag_in_bounds<<<1, n>>>(d, n);
    kvdiag_oob_write<<<1, n>>>(d, n);
    cudaError_t e = cudaDeviceSynchronize();
    printf("sync: %s\n", cudaGetErrorString(e));
    cudaFree(d);
    return e == cudaSuccess ? 0 : 1;
}
