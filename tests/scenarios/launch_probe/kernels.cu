// Two template kernels, one with static and one with dynamic shared memory, launched the two ways
// ggml-cuda launches: `<<<…>>>` (CUDA 13: through __cudaLaunchKernel with a kernel handle) and
// cudaLaunchKernelEx (ggml's PDL path, through cudaLaunchKernelExC with the host stub's address). Built as a shared library with the shared
// CUDA runtime, as libggml-cuda.so is; tests/engine/test_launch_probe_gpu.py links an executable
// holding the launch probe's interposers against it.
#include <cstdio>
#include <cuda_runtime.h>

template <int D, int ncols, bool flag>
__global__ void tile_kernel(float * x) {  // 256 bytes of static shared memory
    __shared__ float tile[64];
    tile[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    if (threadIdx.x < D) { x[threadIdx.x] = tile[31 - threadIdx.x] + ncols + flag; }
}

template <int D>
__global__ void ex_kernel(float * x) {    // dynamic shared memory only: 128 bytes at its launch
    extern __shared__ float dynamic[];
    dynamic[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = dynamic[31 - threadIdx.x] * D;
}

extern "C" int launch_all(void) {
    float * x = nullptr;
    if (cudaMalloc(&x, 256 * sizeof(float)) != cudaSuccess) { return 2; }
    cudaMemset(x, 0, 256 * sizeof(float));
    tile_kernel<256, 4, false><<<1, 32>>>(x);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1);
    cfg.blockDim = dim3(32);
    cfg.dynamicSmemBytes = 128;
    if (cudaLaunchKernelEx(&cfg, ex_kernel<64>, x) != cudaSuccess) { return 3; }
    if (cudaDeviceSynchronize() != cudaSuccess) { return 4; }
    cudaFree(x);
    printf("launched both\n");
    return 0;
}
