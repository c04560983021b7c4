// kvdiag canary, positive control for racecheck: a shared-memory race.
//
// Each thread writes its own slot, then reads the slot of the thread 32 lanes
// away (a thread of the other warp) with no barrier in between. racecheck
// reports "Race reported between Write access at ... and Read access at ..."
// naming the write (marked below) and the read on the line after it.
//
// Launch: grid (1,1,1), block (64,1,1), in/out of n = 64 floats.
// Fixed twin: shared_race_fixed.cu.

extern "C" __global__ void shared_race(const float *in, float *out, int n)
{
    __shared__ float slot[64];
    const int t = threadIdx.x;

    slot[t] = in[t]; // KVDIAG-EXPECT: race-hazard
    const float other = slot[(t + 32) % 64];

    if (t < n) {
        out[t] = other;
    }
}
