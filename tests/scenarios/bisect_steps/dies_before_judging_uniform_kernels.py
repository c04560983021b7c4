"""A bisect step program that dies with a traceback before judging any commit whose kernel is uniform, and is
kvdiag's own step elsewhere. Its death exits 1, which `git bisect run` reads as the new term: a commit blamed
without a verdict, as when a step's interpreter fails (kvdiag upgraded mid-bisection, a broken import)."""

import sys
from pathlib import Path

argv = sys.argv[1:]
source = Path(argv[argv.index("--source") + 1])
if "barrier: uniform" in (source / "kernel.txt").read_text():
    raise RuntimeError("the step program died before it judged this commit")

from kvdiag.commands.bisect import _standalone  # noqa: E402

sys.exit(_standalone())
