"""Benchmark: the cost of judging hostile output against the cost of judging ordinary output.

A build's output is not under kvdiag's control. Issue 43 measured one 10 MB line without a
blank still being judged after 11 minutes, and 10 MB of 1023-character lines taking 33 s,
because one test-backend-ops pattern searched with a leading ``\\S+``. This judges, the way
`kvdiag run` does after a step (kvdiag.engine.evidence.observe, then kvdiag.engine.verdict.judge against
registry entry D1, a test-backend-ops step with an abort and an output signature), three
outputs of the same size:

* ``ordinary``: test-backend-ops case lines and the stderr lines a run prints (the baseline);
* ``spaceless``: one line of that size without a blank (cut to kvdiag.parse.text.LINE_LIMIT);
* ``1023-char``: lines of 1023 characters without a blank, under the cut, each read whole.

Each is judged ``--repeat`` times and the best time kept; the ratios are against the baseline.
Goal (issue 43): both hostile outputs within 2x of the baseline.

    PYTHONPATH=$PWD python3 benchmarks/bench_parse_adversarial.py [--mb 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kvdiag.controls.gate import Gate  # noqa: E402
from kvdiag.engine.verdict.judge import judge_attempt  # noqa: E402
from kvdiag.engine.evidence.observe import observe  # noqa: E402
from kvdiag.registry.loader import load_registry  # noqa: E402

GOAL_RATIO = 2.0
ORDINARY = (
    "  FLASH_ATTN_EXT(hsk=128,hsv=128,nh=4,nr23=[4,1],kv=512,nb={i},mask=1,sinks=0,max_bias=0.000000,"
    "logit_softcap=0.000000,prec=f32,type_KV=f16,permute=[0,1,2,3]): OK\n"
    "ggml_cuda_init: found 1 CUDA devices (Total VRAM: 143771 MiB), case {i} done\n"
)


@dataclass
class Printed:
    """A finished process that printed ``text`` on stdout and exited 0, as the observer reads one."""

    text: str
    returncode: int = 0
    signal: int | None = None
    timed_out: bool = False
    interrupted: bool = False
    ok: bool = True

    def stdout_text(self) -> str:
        return self.text

    combined_text = stdout_text

    def stderr_text(self) -> str:
        return ""

    def describe(self) -> str:
        return f"exit {self.returncode}"

    def to_dict(self) -> dict:
        return {"returncode": self.returncode}


def outputs(size: int) -> dict[str, str]:
    """The three outputs, each ``size`` characters long (give or take one line)."""
    ordinary, i = [], 0
    total = 0
    while total < size:
        piece = ORDINARY.format(i=i)
        ordinary.append(piece)
        total += len(piece)
        i += 1
    line = "x" * 1023 + "\n"
    return {"ordinary": "".join(ordinary), "spaceless": "x" * size + "\n",
            "1023-char": line * (size // len(line))}


def judge_once(entry, text: str) -> float:
    started = time.perf_counter()
    obs = observe(entry.default_step, [Printed(text)], [])
    judge_attempt(entry, obs, Gate(True, "benchmark gate"), 1, 0.0)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0, help="size of each output in MB (default 10)")
    parser.add_argument("--repeat", type=int, default=3, help="judge each this many times, keep the best")
    args = parser.parse_args(argv)
    entry = load_registry(None).get("D1")
    texts = outputs(int(args.mb * 1_000_000))
    seconds = {name: min(judge_once(entry, text) for _ in range(args.repeat)) for name, text in texts.items()}
    base = seconds["ordinary"]
    result = {"mb": args.mb, "seconds": {k: round(v, 3) for k, v in seconds.items()},
              "ratio": {k: round(v / base, 2) for k, v in seconds.items() if k != "ordinary"},
              "goal_ratio": GOAL_RATIO}
    print(json.dumps(result, indent=2))
    return 0 if all(r <= GOAL_RATIO for r in result["ratio"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
