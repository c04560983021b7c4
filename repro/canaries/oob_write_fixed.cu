// kvdiag canary, negative control for memcheck: the fixed twin of
// oob_write.cu. The guard is i < n, so every write stays inside the buffer.
// memcheck must report 0 errors.
//
// Launch: grid (1,1,1), block (128,1,1), in/out of n = 100 floats.

extern "C" __global__ void oob_write_fixed(const float *in, float *out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = (float)i;
    }
}
