// Two template kernels launched the two ways ggml-cuda launches: `<<<…>>>` (CUDA 13: through
// __cudaLaunchKernel with a kernel handle) and cudaLaunchKernelEx (ggml's PDL path, through
// cudaLaunchKernelExC with the host stub's address). Built as a shared library with the shared
// CUDA runtime, as libggml-cuda.so is; tests/engine/test_launch_probe_gpu.py links an executable
// holding the launch probe's interposers against it.
#include <cstdio>
#include <cuda_runtime.h>

template <int D, int ncols, bool flag>
__global__ void tile_kernel(float * x) {
    if (threadIdx.x < D) { x[threadIdx.x] += ncols + flag; }
}

template <int D>
__global__ void ex_kernel(float * x) {
    x[threadIdx.x] *= D;
}

extern "C" int launch_all(void) {
    float * x = nullptr;
    if (cudaMalloc(&x, 256 * sizeof(float)) != cudaSuccess) { return 2; }
    cudaMemset(x, 0, 256 * sizeof(float));
    tile_kernel<256, 4, false><<<1, 32>>>(x);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1);
    cfg.blockDim = dim3(32);
    if (cudaLaunchKernelEx(&cfg, ex_kernel<64>, x) != cudaSuccess) { return 3; }
    if (cudaDeviceSynchronize() != cudaSuccess) { return 4; }
    cudaFree(x);
    printf("launched both\n");
    return 0;
}
