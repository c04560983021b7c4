#!/usr/bin/env bash
# kvdiag's CUPTI launch lister on a GPU machine, end to end, on a tree the launch probe's patch does not fit.
#
#   tests/launch_lister_device.sh TREE OUT
#
# TREE: a ggml or llama.cpp source tree (e.g. `git archive v0.9.7` of ggml, unpacked: no .git);
# OUT: a folder for the logs. It runs the lister's gpu tests, builds TREE's test-backend-ops (CUDA,
# sm_90, -lineinfo), and runs `kvdiag run D2` and a small `kvdiag scan D2` on that build: the verdicts
# must name the lister ("CUPTI injection") and the launched instantiations, and the range must be
# placed by the shipped index (SWEEP=0 leaves out the sweep of every entry). Needs cmake, ninja, nvcc, compute-sanitizer and kvdiag's dependencies
# (PYTHONPATH may point at a folder holding them).
set -u
TREE=$(realpath "$1"); OUT=$(realpath "$2"); mkdir -p "$OUT"
WORK=$(mktemp -d); BUILD="$WORK/build"
export KVDIAG_HOME="$WORK/home" KVDIAG_LAUNCH_LISTER=1
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
KV="python3 -m kvdiag"
{ nvidia-smi -L; nvcc --version | tail -1; compute-sanitizer --version | head -2; } > "$OUT/machine.txt" 2>&1
python3 -m pytest -q -p no:cacheprovider -m gpu tests/workspace/test_launch_lister_gpu.py -s > "$OUT/lister-gpu-tests.txt" 2>&1
echo "lister gpu tests: exit $?" >> "$OUT/summary.txt"
{ cmake -S "$TREE" -B "$BUILD" -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_FLAGS=-lineinfo -DGGML_BUILD_TESTS=ON -DLLAMA_BUILD_TESTS=ON \
  && ninja -C "$BUILD" test-backend-ops; } > "$WORK/build.txt" 2>&1
echo "build: exit $?" >> "$OUT/summary.txt"; tail -n 30 "$WORK/build.txt" > "$OUT/build-tail.txt"
timeout 150 $KV run D2 --build "$BUILD" --format json > "$OUT/run-D2.json" 2> "$WORK/run-D2.err"
echo "run D2: exit $?" >> "$OUT/summary.txt"
timeout 200 $KV scan D2 --build "$BUILD" --params 'hsk=256.*nr23=\[4,1\].*kv=512' --format json > "$OUT/scan-D2.json" 2> "$WORK/scan-D2.err"
echo "scan D2: exit $?" >> "$OUT/summary.txt"
if [ "${SWEEP:-1}" = 1 ]; then
    timeout 150 $KV sweep --build "$BUILD" --format table > "$OUT/sweep.txt" 2> "$WORK/sweep.err"
    echo "sweep: exit $?" >> "$OUT/summary.txt"
fi
for f in run-D2 scan-D2 sweep; do [ -f "$WORK/$f.err" ] || continue; { echo "--- $f stderr"; tail -n 40 "$WORK/$f.err"; } >> "$OUT/summary.txt"; done
tar -czf "$OUT/runs.tar.gz" -C "$KVDIAG_HOME" runs 2>/dev/null
cat "$OUT/summary.txt"
