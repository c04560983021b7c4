"""What a source tree's git history can answer about commits: present, ancestor, shallow, where from.

An affected range is evaluated by git ancestry, as osv-scanner does for GIT
ranges: is the introducing commit an ancestor of the tree's HEAD, is the fix?
`TreeHistory` asks git those questions through the one subprocess layer and
remembers every answer (a sweep asks the same few commits for every entry, from
two threads). It answers only what git says; what the answers mean for a range,
and when a "no" is not to be trusted (a shallow clone), is
``kvdiag.engine.verdict.ranges``' business.

No git work happens until a question is asked: a run whose entries name no
range starts no git process for them.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from kvdiag.proc.runner import CommandNotFound, run_command

__all__ = ["HISTORY_ENV", "HistoryFacts", "TreeHistory", "reference_history"]

#: a clone or mirror (``--history REPO``) where a tree without usable git history is placed by its files
HISTORY_ENV = "KVDIAG_HISTORY"

GIT_TIMEOUT_S = 30.0
# A partial clone (--filter) fetches an object it lacks from its promisor remote on first use, even
# for `cat-file -e`: over the network, to a host this machine may not reach (measured: 57 s for one
# entry's questions to a clone whose remote is github.com, no network). Questions about history must
# never fetch: no lazy fetch (git >= 2.44) and no transport at all (every git).
_GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_NO_LAZY_FETCH": "1"}
_NO_TRANSPORT = ("-c", "protocol.allow=never")


@dataclass(frozen=True)
class HistoryFacts:
    """The tree's git facts that do not depend on the commit asked about."""

    head: str | None                 # full id of HEAD; None when there is no git history here
    why_none: str | None             # why there is none (no source dir, no .git, git missing)
    shallow: bool = False
    remote_urls: tuple[str, ...] = ()
    roots: tuple[str, ...] = ()      # root commits of HEAD's history (empty for a shallow clone)


class TreeHistory:
    """Memoised git questions about one source tree (thread-safe)."""

    def __init__(self, source_dir: Path | None, log_dir: Path):
        self.source_dir = Path(source_dir) if source_dir is not None else None
        self.log_dir = Path(log_dir)
        self._lock = threading.Lock()
        self._facts: HistoryFacts | None = None
        self._answers: dict[tuple[str, ...], bool | None] = {}
        self.memo: dict[str, object] = {}     # for callers' derived answers (the range evidence of an entry)
        self.reference: Path | None = reference_history()

    # ------------------------------------------------------------------ the facts

    def facts(self) -> HistoryFacts:
        with self._lock:
            if self._facts is None:
                self._facts = self._read_facts()
            return self._facts

    def _read_facts(self) -> HistoryFacts:
        if self.source_dir is None:
            return HistoryFacts(None, "the build names no source tree (no CMakeCache.txt, or no "
                                      "CMAKE_HOME_DIRECTORY in it)")
        if not self.source_dir.is_dir():
            return HistoryFacts(None, f"the source tree {self.source_dir} does not exist here")
        try:
            head = self._git(["rev-parse", "--verify", "-q", "HEAD^{commit}"], "git-head")
        except CommandNotFound:
            return HistoryFacts(None, "git is not installed here")
        if head is None or not head.ok:
            inside = self._git(["rev-parse", "--git-dir"], "git-dir")
            if inside is None or not inside.ok:
                return HistoryFacts(None, f"no .git: {self.source_dir} is not a git checkout")
            return HistoryFacts(None, f"{self.source_dir} is a git repository without a commit checked out")
        shallow_r = self._git(["rev-parse", "--is-shallow-repository"], "git-is-shallow")
        shallow = shallow_r is not None and shallow_r.ok and shallow_r.stdout_text().strip() == "true"
        remotes_r = self._git(["config", "--get-regexp", r"^remote\..*\.url$"], "git-remotes")
        urls = tuple(line.split(None, 1)[1] for line in (remotes_r.stdout_text().splitlines() if remotes_r is not None
                                                          and remotes_r.ok else ()) if len(line.split(None, 1)) == 2)
        roots: tuple[str, ...] = ()
        if not shallow:
            roots_r = self._git(["rev-list", "--max-parents=0", "HEAD"], "git-roots")
            roots = tuple(roots_r.stdout_text().split()) if roots_r is not None and roots_r.ok else ()
        return HistoryFacts(head=head.stdout_text().strip(), why_none=None, shallow=shallow, remote_urls=urls,
                            roots=roots)

    # ------------------------------------------------------------------ questions about commits

    def has_commit(self, commit: str) -> bool:
        """Whether the object store holds ``commit`` as a commit (``git cat-file -e <id>^{commit}``)."""
        answer = self._memo(("has", commit), lambda: self._exit_code(["cat-file", "-e", f"{commit}^{{commit}}"],
                                                                     f"git-has-{commit[:12]}") == 0)
        return bool(answer)

    def look_up(self, commits: Iterable[str]) -> None:
        """Ask once which of ``commits`` the object store holds (``git rev-list --no-walk
        --ignore-missing``, one process): a partial clone takes most of a second per missing commit
        asked one by one. `has_commit` then answers from memory."""
        wanted = sorted({c for c in commits if c} - {key[1] for key in self._answers if key[0] == "has"})
        if not wanted or self.facts().head is None:
            return
        try:
            result = self._git(["rev-list", "--no-walk", "--ignore-missing", *wanted], f"git-has-{len(wanted)}-commits")
        except CommandNotFound:
            return
        if result is None or result.returncode != 0:
            return                      # each is then asked alone
        present = set(result.stdout_text().split())
        with self._lock:
            for commit in wanted:
                self._answers.setdefault(("has", commit), commit in present)

    def is_ancestor(self, older: str, newer: str) -> bool | None:
        """``git merge-base --is-ancestor older newer``: True, False, or None when git could not say
        (a commit it does not have, a failure). A commit is its own ancestor, as git counts it."""
        def ask() -> bool | None:
            code = self._exit_code(["merge-base", "--is-ancestor", older, newer],
                                   f"git-is-ancestor-{older[:12]}-{newer[:12]}")
            return {0: True, 1: False}.get(code) if code is not None else None
        return self._memo(("anc", older, newer), ask)

    # ------------------------------------------------------------------ plumbing

    def _memo(self, key: tuple[str, ...], ask: Callable[[], bool | None]) -> bool | None:
        with self._lock:
            if key in self._answers:
                return self._answers[key]
        answer = ask()
        with self._lock:
            return self._answers.setdefault(key, answer)

    def _exit_code(self, args: list[str], name: str) -> int | None:
        try:
            result = self._git(args, name)
        except CommandNotFound:
            return None
        if result is None or result.timed_out:
            return None
        return result.returncode

    def _git(self, args: list[str], name: str):
        result = run_command(["git", *_NO_TRANSPORT, "-C", str(self.source_dir), *args], timeout=GIT_TIMEOUT_S,
                             log_dir=self.log_dir, name=name, env_overrides=_GIT_ENV)
        if result.timed_out:
            return None
        return result


def reference_history() -> Path | None:
    """The history ``--history`` (``$KVDIAG_HISTORY``) names, where a tree without its own is placed."""
    named = os.environ.get(HISTORY_ENV, "").strip()
    return Path(named) if named else None
