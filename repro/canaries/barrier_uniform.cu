// kvdiag canary, negative control for synccheck: the fixed twin of
// barrier_divergent.cu. The barrier is hoisted out of the warp-divergent
// branch, so every warp of the block reaches the same barriers in the same
// order (the shape of the D2 fix). synccheck must report 0 errors.
//
// Launch: grid (1,1,1), block (32,4,1), in/out of n = 128 floats.

extern "C" __global__ void barrier_uniform(const float *in, float *out, int n)
{
    __shared__ float tile[4][32];
    const int x = threadIdx.x;
    const int y = threadIdx.y;

    tile[y][x] = in[y * 32 + x];
    __syncthreads();

    float sum = 0.0f;
    if (y % 4 == 0) {
        for (int w = 0; w < 4; ++w) {
            sum += tile[w][x];
        }
    }
    __syncthreads();
    if (y % 4 == 0) {
        tile[0][x] = sum;
    }
    __syncthreads();

    if (y * 32 + x < n) {
        out[y * 32 + x] = tile[0][x];
    }
}
