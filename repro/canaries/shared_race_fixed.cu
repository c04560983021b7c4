// kvdiag canary, negative control for racecheck: the fixed twin of
// shared_race.cu. A __syncthreads() separates the writes from the reads of
// other threads' slots. racecheck must report 0 hazards.
//
// Launch: grid (1,1,1), block (64,1,1), in/out of n = 64 floats.

extern "C" __global__ void shared_race_fixed(const float *in, float *out, int n)
{
    __shared__ float slot[64];
    const int t = threadIdx.x;

    slot[t] = in[t];
    __syncthreads();
    const float other = slot[(t + 32) % 64];

    if (t < n) {
        out[t] = other;
    }
}
