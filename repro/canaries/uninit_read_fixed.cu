// kvdiag canary, negative control for initcheck: the fixed twin of
// uninit_read.cu. The kernel is the same; the difference is on the host: the
// catalogue tells the launcher to memset in before the launch, so every read
// sees initialised memory. initcheck must report 0 errors.
//
// Launch: grid (1,1,1), block (128,1,1), in/out of n = 128 floats, in memset to 0.

extern "C" __global__ void uninit_read_fixed(const float *in, float *out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = in[i] + 1.0f;
    }
}
