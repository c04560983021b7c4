// kvdiag canary, positive control for memcheck: an out-of-bounds global write.
//
// The bounds check is off by one (i <= n), so the thread with i == n writes
// one element past the end of out, a cudaMalloc'd buffer of exactly n floats.
// memcheck reports "Invalid __global__ write of size 4 bytes" at the store
// marked below.
//
// Launch: grid (1,1,1), block (128,1,1), in/out of n = 100 floats.
// Fixed twin: oob_write_fixed.cu.

extern "C" __global__ void oob_write(const float *in, float *out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) {
        out[i] = (float)i; // KVDIAG-EXPECT: invalid-write
    }
}
