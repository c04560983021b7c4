#!/bin/bash
# Sweep a build on N GPUs with a Slurm job array, then merge the parts in a dependent job.
#
#   examples/slurm/submit.sh BUILD_DIR PARTS_DIR [N]
#
# BUILD_DIR and PARTS_DIR must be on storage every node sees. Prints the two job ids; the
# merged sweep lands in PARTS_DIR/sweep.json (with sweep.md, kvdiag.sarif, kvdiag-junit.xml).
set -euo pipefail

if [ "$#" -lt 2 ]; then
    echo "usage: $0 BUILD_DIR PARTS_DIR [N]" >&2
    exit 64
fi
build="$(realpath "$1")"
parts="$(realpath -m "$2")"
shards="${3:-4}"
here="$(dirname "$(realpath "$0")")"
mkdir -p "$parts"

# --parsable prints "jobid" or "jobid;cluster": the dependency takes the id
array="$(sbatch --parsable --array="0-$((shards - 1))" \
    --export="ALL,KVDIAG_BUILD=$build,KVDIAG_PARTS=$parts" "$here/sweep-array.sbatch")"
array="${array%%;*}"
merge="$(sbatch --parsable --dependency="afterany:$array" \
    --export="ALL,KVDIAG_PARTS=$parts" "$here/merge.sbatch")"
echo "sweep array: $array ($shards tasks), merge: ${merge%%;*} -> $parts/sweep.json"
