"""Benchmark: what the route phase's launch gate costs per case that reached none of the entry's kernels,
matching the kernel listing against the entry for every such case (as before) or once (kvdiag's way).

On an H100 (device session 32, `kvdiag scan D2 --params hsk`, tests/fixtures/device/h100-session32/) the
detect phase's first batch started 7.3 s after the last route process had ended (12.5 s on the first call,
which also listed the build's kernels). The route units judge their cases after their processes end, and
for each of the 902 cases that launched none of D2's kernels the gate asked which of the build's 6201
kernels D2 is about. This times that gate on a listing of LISTED kernel names shaped like ggml's (the
FlashAttention, matrix-multiplication and CUB families, with template arguments), for CASES such cases,
both ways in one run, and checks that both give the same answer.

    python3 benchmarks/bench_route_judging.py [--listed 6201] [--cases 902]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvdiag.engine.evidence import launch_proof  # noqa: E402
from kvdiag.engine.evidence.launch_proof import LaunchContext, judge_launch  # noqa: E402
from kvdiag.parse.launches import parse_launches  # noqa: E402
from kvdiag.registry.loader import load_registry  # noqa: E402
from kvdiag.workspace.kernel_symbols import KernelSymbols  # noqa: E402


def ggml_like_listing(n: int) -> KernelSymbols:
    """``n`` kernel names in the shapes a CUDA ggml build lists (a few dozen of D2's family among them)."""
    types = ["float", "__half2", "__nv_bfloat162"]
    shapes = [
        lambda a, b, c, d: f"mul_mat_f<{types[a % 3]}, {32 * (1 + b % 2)}, {c}, {d}, {'true' if a % 2 else 'false'}>",
        lambda a, b, c, d: f"mul_mat_q<(ggml_type){a}, {8 * (1 + b)}, {'true' if c % 2 else 'false'}>",
        lambda a, b, c, d: f"flash_attn_ext_vec<{64 << (a % 3)}, {1 + b % 2}, (ggml_type){c}, (ggml_type){d}, false>",
        lambda a, b, c, d: ("cub::CUB_300001_SM_900::detail::radix_sort::DeviceRadixSortOnesweepKernel<cub::"
                            f"CUB_300001_SM_900::detail::radix::policy_hub<float, int, unsigned int>::Policy{a}{b}{c}{d}, "
                            "(cub::CUB_300001_SM_900::SortOrder)1, float, int, unsigned int, int, int>"),
        lambda a, b, c, d: f"k_bin_bcast<&op_{a}, {types[b % 3]}, {types[c % 3]}, float, float const*, float const*>",
    ]
    names = []
    for i, (a, b, c, d) in enumerate(itertools.product(range(40), range(8), range(10), range(10))):
        names.append(shapes[i % len(shapes)](a, b, c, d))
        if len(names) >= n - 40:
            break
    names += [f"flash_attn_ext_f16<{64 * (1 + k % 4)}, {64 * (1 + k % 4)}, {1 << (k % 5)}, 1, false, false>"
              for k in range(40)]
    return KernelSymbols("libggml-cuda.so", "cuobjdump -symbols | c++filt", tuple(names))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listed", type=int, default=6201)
    ap.add_argument("--cases", type=int, default=902)
    args = ap.parse_args()
    d2 = load_registry().get("D2")
    listing = ggml_like_listing(args.listed)
    context = LaunchContext(symbols=lambda: listing, per_case=True)
    launched = parse_launches("kvdiag-launch: void flash_attn_ext_vec<128, 1, (ggml_type)1, (ggml_type)1, false>"
                              "(char const*)  [kvdiag-smem 0+0]\n")
    arms = {}
    for arm in ("each-case", "once"):
        launch_proof._compiled_kernels.cache_clear()
        texts = set()
        started = time.perf_counter()
        for _ in range(args.cases):
            if arm == "each-case":
                launch_proof._compiled_kernels.cache_clear()
            texts.add(judge_launch(d2, launched, True, context, tool="synccheck").text)
        arms[arm] = {"s": time.perf_counter() - started, "texts": texts}
        print(json.dumps({"arm": arm, "cases": args.cases, "listed": len(listing.kernels),
                          "wall_s": round(arms[arm]["s"], 3),
                          "ms_per_case": round(arms[arm]["s"] / args.cases * 1000, 3)}), flush=True)
    same = arms["each-case"]["texts"] == arms["once"]["texts"] and len(arms["once"]["texts"]) == 1
    print(json.dumps({"ratio": round(arms["each-case"]["s"] / arms["once"]["s"], 1), "same_answer": same}), flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
