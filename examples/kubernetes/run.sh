#!/bin/bash
# Run kvdiag-sweep.yaml, wait for its pods, then run kvdiag-merge.yaml and show its log.
# Kubernetes has no dependency between Jobs: this script is the dependency.
#
#   examples/kubernetes/run.sh [NAMESPACE]
#
# Exits with the merged sweep's code (0 nothing found, 1 confirmed, 4 inconclusive, 64 a part missing).
set -euo pipefail

here="$(dirname "$(realpath "$0")")"
namespace="${1:-default}"
k() { kubectl --namespace "$namespace" "$@"; }

# Wait until job $1 is Complete or Failed (a merge that finds a confirmed defect exits 1, so its
# Job fails), for at most $2 seconds; print which.
finished() {
    local state=""
    for _ in $(seq "$(($2 / 10))"); do
        state="$(k get job "$1" --output=jsonpath='{.status.conditions[*].type}')"
        case " $state " in
            *" Complete "* | *" Failed "*) break ;;
        esac
        sleep 10
    done
    echo "$1: ${state:-still running after $2 s}"
}

k delete job kvdiag-sweep kvdiag-merge --ignore-not-found
k apply -f "$here/kvdiag-sweep.yaml"
finished kvdiag-sweep 7200          # the merge names any shard that left no part
k apply -f "$here/kvdiag-merge.yaml"
finished kvdiag-merge 900
k logs job/kvdiag-merge
code="$(k get pods --selector=job-name=kvdiag-merge \
    --output=jsonpath='{.items[0].status.containerStatuses[0].state.terminated.exitCode}')"
exit "${code:-70}"
