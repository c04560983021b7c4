// kvdiag canary, positive control for initcheck: a read of device memory
// that was allocated and never written.
//
// The launcher allocates in (cudaMalloc, n floats) and, for this canary only,
// never writes it. memcheck sees nothing wrong (every access is in bounds);
// initcheck reports "Uninitialized __global__ memory read of size 4 bytes" at
// the load marked below.
//
// Launch: grid (1,1,1), block (128,1,1), in/out of n = 128 floats, in NOT set.
// Fixed twin: uninit_read_fixed.cu (same code; the launcher memsets in first).

extern "C" __global__ void uninit_read(const float *in, float *out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = in[i] + 1.0f; // KVDIAG-EXPECT: uninitialized-access
    }
}
