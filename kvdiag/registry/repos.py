"""The repositories an affected range may name, and how a source tree is recognised as one of them.

An OSV GIT range is only meaningful against the history of its own repository:
ggml's fix commit says nothing about a llama.cpp tree (llama.cpp syncs ggml under
``ggml/`` with other commit ids), and a fork's commits say nothing about upstream.
kvdiag therefore names every repository a range may use here, with what
identifies a clone of it when its remote URL does not (a copied tree, a mirror, a
clone of a clone):

- ``roots``: the root commits of its history. A complete clone has them, a
  shallow one does not.
- ``markers``: commits only it has (a fork's first own commit). Any of them in a
  tree's object store makes the tree that repository, as do the commits of the
  registry's own ranges for it.
- ``includes``: the repositories whose whole history it contains. A fork of
  llama.cpp carries upstream's commits, so upstream's ranges apply to it too;
  the reverse does not hold.

`kvdiag registry lint` accepts a range only for a repository named here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["KNOWN_REPOS", "KnownRepo", "known_repo", "normalize_url", "repo_label"]


@dataclass(frozen=True)
class KnownRepo:
    url: str                           # as a range writes it: https://github.com/<owner>/<name>
    name: str                          # how a verdict names it
    roots: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()
    includes: tuple[str, ...] = ()     # urls of repositories whose history this one contains
    aliases: tuple[str, ...] = ()      # other urls of the same repository (a renamed owner)


GGML = "https://github.com/ggml-org/ggml"
LLAMA_CPP = "https://github.com/ggml-org/llama.cpp"
BEELLAMA = "https://github.com/GenerelSchwerz/llama.cpp"

KNOWN_REPOS: dict[str, KnownRepo] = {
    GGML: KnownRepo(
        url=GGML, name="ggml",
        roots=("fb558f78d905f85c54813602649ddd628ffe0f3a",),
        aliases=("https://github.com/ggerganov/ggml",)),
    LLAMA_CPP: KnownRepo(
        url=LLAMA_CPP, name="llama.cpp",
        roots=("26c084662903ddaca19bef982831bfb0856e8257",),
        aliases=("https://github.com/ggerganov/llama.cpp",)),
    BEELLAMA: KnownRepo(
        url=BEELLAMA, name="BeeLlama fork",
        # the fork's first own commit ("WIP: add TurboQuant KV cache types", 2026-03-24), an ancestor of
        # 775450a68 and of no upstream commit: every clone of the fork's line of history has it
        markers=("4ff5bf885b572059fe9ace90e32e41954a2aa20d",),
        includes=(LLAMA_CPP,)),
}

_SCP_LIKE = re.compile(r"^(?:[^@/]+@)?(?P<host>[^:/]+):(?P<path>[^/].*)$")   # git@github.com:owner/name.git


def normalize_url(url: str) -> str:
    """``host/owner/name`` in lower case, whatever the spelling: https or ssh, ``.git`` or not,
    ``git@host:owner/name``. A local path stays a path (it identifies nothing)."""
    text = url.strip()
    match = _SCP_LIKE.match(text) if "://" not in text else None
    if match:
        text = f"{match['host']}/{match['path']}"
    else:
        text = re.sub(r"^[a-z+]+://", "", text)
        text = re.sub(r"^[^@/]+@", "", text)          # user@ of ssh://user@host/...
    text = text.rstrip("/")
    if text.endswith(".git"):
        text = text[:-4]
    return text.lower()


_BY_URL = {normalize_url(u): repo for repo in KNOWN_REPOS.values() for u in (repo.url, *repo.aliases)}


def known_repo(url: str) -> KnownRepo | None:
    """The known repository ``url`` names (any spelling), or None."""
    return _BY_URL.get(normalize_url(url))


def repo_label(url: str) -> str:
    repo = known_repo(url)
    return repo.name if repo is not None else url
