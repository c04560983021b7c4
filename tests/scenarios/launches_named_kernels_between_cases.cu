// Launches three kernels between printed case lines, as test-backend-ops does: a template kernel at
// two instantiations through <<<>>> (the runtime) and a plain one through cuLaunchKernel (the driver,
// found with dlsym so that the program links without libcuda's stub).
// For kvdiag's CUPTI launch lister (tests/workspace/test_launch_lister_gpu.py): each "kvdiag-launch:" line
// must land between its case's "begin" and "end" lines, also with stdout redirected to a file.
#include <cstdio>
#include <dlfcn.h>
#include <cuda.h>
#include <cuda_runtime.h>

template <int N>
__global__ void scale_by(float * x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= N;
}

extern "C" __global__ void add_one(float * x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}

int main() {
    const int n = 256;
    float * x = nullptr;
    if (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess) { printf("no device memory\n"); return 2; }
    cudaMemset(x, 0, n * sizeof(float));
    printf("begin case scale<2>\n");
    scale_by<2><<<1, n>>>(x, n);
    cudaDeviceSynchronize();
    printf("end case scale<2>: OK\n");
    printf("begin case scale<3>\n");
    scale_by<3><<<1, n>>>(x, n);
    cudaDeviceSynchronize();
    printf("end case scale<3>: OK\n");
    printf("begin case add_one (driver)\n");
    CUfunction fn = nullptr;
    cudaFunction_t rt = nullptr;
    cudaGetFuncBySymbol(&rt, (const void *) add_one);
    fn = (CUfunction) rt;
    int count = n;
    void * args[] = { &x, &count };
    typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 CUstream, void **, void **);
    void * cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    launch_t launch = cuda ? (launch_t) dlsym(cuda, "cuLaunchKernel") : nullptr;
    CUresult r = launch ? launch(fn, 1, 1, 1, n, 1, 1, 0, nullptr, args, nullptr) : CUDA_ERROR_NOT_FOUND;
    cudaDeviceSynchronize();
    printf("end case add_one (driver): %s\n", r == CUDA_SUCCESS ? "OK" : "FAIL");
    cudaFree(x);
    return 0;
}
