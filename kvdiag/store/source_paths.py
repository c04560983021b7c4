"""Where an entry's source file lives in the target's tree: ggml's layout or llama.cpp's.

The registry names files as the tree it was written against had them: ggml
keeps ``src/ggml-cuda/fattn-mma-f16.cuh``, llama.cpp and its forks vendor ggml
under ``ggml/`` (``ggml/src/ggml-cuda/fattn-mma-f16.cuh``). A SARIF upload must
name the path that exists in the tree that was scanned, so:

* at sweep time each entry's files are resolved against the real source tree
  and recorded in the outcome (``sources``, see `resolve_in_tree`);
* a sweep file without that record (kvdiag 0.1.x) tells the layout from its
  recorded build: a llama.cpp build has ``LLAMA_*`` cmake options (`layout_of_build`).
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any, Iterable, Mapping

from kvdiag.records.sweep import SweepOutcome

GGML = "ggml"
LLAMA = "llama.cpp"

_GGML_ROOTS = ("src/ggml", "include/ggml", "cmake/")


def ggml_relative(file: str) -> str | None:
    """``ggml/src/ggml-cuda/x.cuh`` or ``src/ggml-cuda/x.cuh`` -> ``src/ggml-cuda/x.cuh``; None for
    a file that is not part of ggml (``tests/test-kvarn.cpp``)."""
    path = posixpath.normpath(file.replace("\\", "/")).lstrip("/")
    if path.startswith("ggml/"):
        return path[len("ggml/"):]
    if path.startswith(_GGML_ROOTS):
        return path
    return None


def in_layout(file: str, layout: str | None) -> str:
    """The path of ``file`` in a tree of ``layout`` (unchanged when the layout is unknown or the
    file is not ggml's)."""
    rel = ggml_relative(file)
    if rel is None or layout is None:
        return posixpath.normpath(file.replace("\\", "/")).lstrip("/")
    return f"ggml/{rel}" if layout == LLAMA else rel


def resolve_in_tree(file: str, source_dir: Path) -> str | None:
    """The path of ``file`` that exists under ``source_dir`` (as written, or in either layout)."""
    candidates = dict.fromkeys((in_layout(file, None), in_layout(file, LLAMA), in_layout(file, GGML)))
    for candidate in candidates:
        if (Path(source_dir) / candidate).is_file():
            return candidate
    return None


def layout_of_build(build: Mapping[str, Any] | None) -> str | None:
    """llama.cpp when the recorded cmake options include ``LLAMA_*``, ggml when they are ggml's only,
    None when nothing was recorded."""
    options = (build or {}).get("options") or {}
    if any(str(name).startswith("LLAMA_") for name in options):
        return LLAMA
    if any(str(name).startswith("GGML_") for name in options):
        return GGML
    return None


def record_sources(files: Iterable[str], source_dir: str | Path | None) -> list[str] | None:
    """Each file's path in the tree at ``source_dir``, for the outcome's ``sources``; None when the
    tree cannot be read here (nothing is recorded rather than a guess)."""
    if not source_dir or not Path(source_dir).is_dir():
        return None
    root = Path(source_dir)
    layout = LLAMA if (root / "ggml" / "src").is_dir() else GGML if (root / "src").is_dir() else None
    return [resolve_in_tree(f, root) or in_layout(f, layout) for f in files]


def source_paths(outcome: SweepOutcome, target: Mapping[str, Any] | None) -> list[str]:
    """The entry's files as repository paths of the swept tree: recorded at sweep time when the
    sweep has them, else mapped by the layout of the recorded build."""
    if outcome.sources:
        return list(outcome.sources)
    layout = layout_of_build((target or {}).get("build"))
    return [in_layout(f, layout) for f in outcome.files]
