// kvdiag canary, positive control for synccheck: a divergent __syncthreads().
//
// The D2 pattern (ggml fattn-mma-f16.cuh, the combine step of the MMA
// flash-attention kernel): the warps with threadIdx.y % 4 == 0 reach one
// barrier, every other warp reaches a different one in the else branch. The
// barrier counts still add up, so nothing hangs and the numbers come out
// right; synccheck reports "Barrier error detected. Divergent thread(s) in
// block." at the barrier inside the if branch (the one marked below).
//
// Launch: grid (1,1,1), block (32,4,1), in/out of n = 128 floats.
// Fixed twin: barrier_uniform.cu.

extern "C" __global__ void barrier_divergent(const float *in, float *out, int n)
{
    __shared__ float tile[4][32];
    const int x = threadIdx.x;
    const int y = threadIdx.y;

    tile[y][x] = in[y * 32 + x];
    __syncthreads();

    if (y % 4 == 0) {
        float sum = 0.0f;
        for (int w = 0; w < 4; ++w) {
            sum += tile[w][x];
        }
        __syncthreads(); // KVDIAG-EXPECT: barrier-divergence
        tile[0][x] = sum;
    } else {
        __syncthreads();
    }
    __syncthreads();

    if (y * 32 + x < n) {
        out[y * 32 + x] = tile[0][x];
    }
}
