"""A history's line of commits, and which blob each named file held along it: where a tree's files fit.

Built from one git repository (``--history REPO``, or ggml's mirror for the index
kvdiag ships, ``kvdiag/data/ggml-blobs.json``) along HEAD's first-parent line, the
line a release is cut from. ggml's master is linear (3 merges in 4403 commits at
d99724f2), so the position of a commit on that line orders it as git ancestry does.

For each file, the timeline keeps runs of positions ``[lo, hi]`` over which the file
held one blob. A tree whose files hold blobs b1..bn fits the positions where every
file held its blob at once: usually one run, the commits between two changes of
those files. The timeline also keeps ggml's version stamp per run, from its
CMakeLists.txt, so that a tree whose files match nothing (changed locally, or
newer than the history) can still be placed by its stamp.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from kvdiag.fileio import load_json_file
from kvdiag.proc.runner import run_command
from kvdiag.workspace.placement.blobs import ggml_key

__all__ = ["Span", "Timeline", "timeline_from_git"]

GIT_TIMEOUT_S = 120.0
_GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_NO_LAZY_FETCH": "1"}
_NULL_BLOB = "0" * 40
VERSION_FILE = "CMakeLists.txt"
_VERSION_LINE = re.compile(r"^\s*set\s*\(\s*GGML_VERSION_(MAJOR|MINOR|PATCH)\s+(\d+)\s*\)")


@dataclass(frozen=True)
class Span:
    """Positions ``lo..hi`` on the line (``hi`` None: from ``lo`` to beyond the history's end)."""

    lo: int
    hi: int | None


@dataclass
class Timeline:
    """Runs of blobs per file along one history's first-parent line (JSON-serialisable)."""

    repo: str                                   # the repository url the line belongs to
    source: str                                 # where it was read: "ggml mirror at d99724f2", a path
    length: int                                 # commits on the line
    commits: dict[str, tuple[int, str]]         # full id -> (position, commit date) for the commits it names
    files: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)   # key -> [(blob, lo, hi)]
    versions: dict[str, list[tuple[int, int]]] = field(default_factory=dict)     # "0.9.7" -> [(lo, hi)]
    _by_position: dict[int, str] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ lookups

    def commit_at(self, position: int) -> str | None:
        if not self._by_position:
            self._by_position = {pos: c for c, (pos, _) in self.commits.items()}
        return self._by_position.get(position)

    def position(self, commit: str) -> int | None:
        """A commit's position, by full id or an unambiguous prefix of at least 7 hex digits."""
        if commit in self.commits:
            return self.commits[commit][0]
        if len(commit) >= 7:
            hits = [pos for c, (pos, _) in self.commits.items() if c.startswith(commit)]
            if len(hits) == 1:
                return hits[0]
        return None

    def label(self, position: int) -> str:
        """``d6754f3d (2026-02-15)`` for a position the timeline names."""
        commit = self.commit_at(position)
        return f"{commit[:9]} ({self.commits[commit][1]})" if commit else f"position {position}"

    @property
    def head(self) -> int:
        return self.length - 1

    # ------------------------------------------------------------------ placing

    def fit(self, blobs: Mapping[str, str]) -> tuple[list[Span], dict[str, str]]:
        """The spans where every known file held its blob at once, and why each file that
        constrains nothing was left out (``{key: "matches no version of it here"}``)."""
        spans: list[Span] | None = None
        left_out: dict[str, str] = {}
        for key, blob in sorted(blobs.items()):
            runs = self.files.get(key)
            if runs is None:
                continue                             # a file this history does not track
            held = [Span(lo, hi) for b, lo, hi in runs if b == blob]
            if not held:
                left_out[key] = f"{key} ({blob[:9]}) matches no version of it in {self.source}"
                continue
            spans = held if spans is None else _intersect(spans, held)
        return spans or [], left_out

    def version_span(self, version: str) -> list[Span]:
        """Where ggml's stamp said ``version``; past the last stamp known here, from the history's end on."""
        if version in self.versions:
            return [Span(lo, hi) for lo, hi in self.versions[version]]
        known = [v for v in self.versions if _version_key(v) is not None]
        if known and _version_key(version) is not None and _version_key(version) > max(map(_version_key, known)):
            return [Span(self.head, None)]
        return []

    # ------------------------------------------------------------------ storage

    def to_dict(self) -> dict[str, Any]:
        return {"repo": self.repo, "source": self.source, "length": self.length,
                "commits": {c: list(v) for c, v in sorted(self.commits.items(), key=lambda kv: kv[1][0])},
                "files": {k: [list(r) for r in v] for k, v in sorted(self.files.items())},
                "versions": {k: [list(r) for r in v] for k, v in self.versions.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Timeline":
        return cls(repo=str(data["repo"]), source=str(data["source"]), length=int(data["length"]),
                   commits={c: (int(v[0]), str(v[1])) for c, v in data["commits"].items()},
                   files={k: [(str(b), int(lo), int(hi)) for b, lo, hi in v] for k, v in data["files"].items()},
                   versions={k: [(int(lo), int(hi)) for lo, hi in v] for k, v in data.get("versions", {}).items()})

    @classmethod
    def load(cls, path: Path) -> "Timeline":
        return cls.from_dict(load_json_file(path))


def _intersect(a: list[Span], b: list[Span]) -> list[Span]:
    out = []
    for x in a:
        for y in b:
            lo = max(x.lo, y.lo)
            his = [h for h in (x.hi, y.hi) if h is not None]
            hi = min(his) if his else None
            if hi is None or lo <= hi:
                out.append(Span(lo, hi))
    return out


def _version_key(version: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(p) for p in version.split("."))
    except ValueError:
        return None


# ---------------------------------------------------------------------- building from git

def timeline_from_git(repo_dir: Path, keys: Iterable[str], *, log_dir: Path, repo_url: str,
                      keep_commits: Iterable[str] = ()) -> Timeline:
    """Read a timeline from a clone or mirror at ``repo_dir``: HEAD's first-parent line, the runs of
    each of ggml's ``keys`` (and of its CMakeLists.txt, for the version stamps), and the positions of
    ``keep_commits`` (the registry's range commits) when they are on the line. Three git processes,
    whatever the length of the history. Raises ``OSError`` when git cannot read the repository."""
    prefix = "ggml/" if _git_ok(repo_dir, ["cat-file", "-e", "HEAD:ggml/CMakeLists.txt"], log_dir) else ""
    line = _git_lines(repo_dir, ["log", "--first-parent", "--reverse", "--format=%H %cs", "HEAD"], log_dir,
                      "history-line")
    order = [tuple(row.split(" ", 1)) for row in line if " " in row]
    position = {c: i for i, (c, _) in enumerate(order)}
    wanted = sorted({ggml_key(k) for k in keys})
    raw = _git_lines(repo_dir, ["log", "--first-parent", "--reverse", "--no-renames", "--raw", "--no-abbrev",
                                "--format=C %H", "HEAD", "--", *(prefix + k for k in wanted)], log_dir, "history-raw")
    changes: dict[str, list[tuple[int, str]]] = {}
    at = -1
    for row in raw:
        if row.startswith("C "):
            at = position.get(row[2:].strip(), -1)
        elif row.startswith(":") and at >= 0 and "\t" in row:
            meta, path = row.split("\t", 1)
            new_blob = meta.split()[3]
            changes.setdefault(ggml_key(path), []).append((at, new_blob))
    last = len(order) - 1
    files = {key: [(blob, lo, hi) for blob, lo, hi in _runs(events, last) if blob != _NULL_BLOB]
             for key, events in changes.items()}
    versions = _version_runs(repo_dir, prefix, position, last, log_dir)
    named = {pos for runs in files.values() for _, lo, hi in runs for pos in (lo, hi)} | {last}
    named |= {position[c] for c in keep_commits if c in position}
    commits = {order[p][0]: (p, order[p][1]) for p in sorted(named) if 0 <= p <= last}
    source = f"{repo_url.rsplit('/', 1)[-1]} history at {order[last][0][:9]}" if order else str(repo_dir)
    return Timeline(repo=repo_url, source=source, length=len(order), commits=commits,
                    files=files, versions=versions)


def _runs(events: list[tuple[int, str]], last: int) -> list[tuple[str, int, int]]:
    """Change events (position, new blob) into runs (blob, lo, hi) up to ``last``."""
    runs = []
    for i, (pos, blob) in enumerate(events):
        end = events[i + 1][0] - 1 if i + 1 < len(events) else last
        if end >= pos:
            runs.append((blob, pos, end))
    return runs


def _version_runs(repo_dir: Path, prefix: str, order_position: Mapping[str, int], last: int,
                  log_dir: Path) -> dict[str, list[tuple[int, int]]]:
    """ggml's version stamp over the line, from the ``set(GGML_VERSION_*)`` lines each change of its
    CMakeLists.txt added (one ``git log -p -U0``, the stamp carried from commit to commit)."""
    rows = _git_lines(repo_dir, ["log", "--first-parent", "--reverse", "-p", "-U0", "--format=C %H", "HEAD", "--",
                                 prefix + VERSION_FILE], log_dir, "history-versions")
    parts: dict[str, str] = {}
    marks: list[tuple[int, str | None]] = []
    at = -1
    for row in rows:
        if row.startswith("C "):
            at = order_position.get(row[2:].strip(), -1)
            continue
        if row.startswith("+") and at >= 0:
            found = _VERSION_LINE.match(row[1:])
            if found:
                parts[found.group(1)] = str(int(found.group(2)))
                version = ".".join(parts[k] for k in ("MAJOR", "MINOR", "PATCH")) if len(parts) == 3 else None
                if marks and marks[-1][0] == at:
                    marks[-1] = (at, version)
                else:
                    marks.append((at, version))
    versions: dict[str, list[tuple[int, int]]] = {}
    for i, (pos, version) in enumerate(marks):
        end = marks[i + 1][0] - 1 if i + 1 < len(marks) else last
        if version is None or end < pos:
            continue
        spans = versions.setdefault(version, [])
        if spans and spans[-1][1] + 1 == pos:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((pos, end))
    return versions


def _git_ok(repo_dir: Path, args: list[str], log_dir: Path) -> bool:
    result = run_command(["git", "-C", str(repo_dir), *args], timeout=GIT_TIMEOUT_S, log_dir=log_dir,
                         name="history-layout", env_overrides=_GIT_ENV)
    return result.ok


def _git_lines(repo_dir: Path, args: list[str], log_dir: Path, name: str) -> list[str]:
    result = run_command(["git", "-c", "protocol.allow=never", "-C", str(repo_dir), *args], timeout=GIT_TIMEOUT_S,
                         log_dir=log_dir, name=name, env_overrides=_GIT_ENV)
    if not result.ok:
        raise OSError(f"git {' '.join(args[:2])} failed in {repo_dir}: {result.describe()}")
    return result.stdout_text().splitlines()
