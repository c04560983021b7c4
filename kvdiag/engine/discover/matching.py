"""Known or new: each root matched against the registry's signatures.

A root is known when an entry has a signature that would confirm it: a sanitizer matcher of
the root's tool and kind whose site regex finds the root's file:line and whose kernel regex
finds the reporting function or one of the kernels that launched it; or, for an abort root,
an abort matcher of its kind whose message regex finds the abort's message. The rule is the
matchers' own (engine.evidence.matchers), applied to the root instead of a run's output, so a root
that discovery calls known is one that `kvdiag run` of that entry would confirm.
"""

from __future__ import annotations

import re
from typing import Iterable

from kvdiag.engine.discover.findings import ABORT
from kvdiag.engine.discover.roots import Root
from kvdiag.registry.entry import Entry, Matcher


def _found(pattern: str | None, *texts: str | None) -> bool:
    if pattern is None:
        return True
    return any(text is not None and re.search(pattern, text) for text in texts)


def sanitizer_match(matcher: Matcher, root: Root) -> bool:
    if matcher.type != "sanitizer" or root.is_abort:
        return False
    if matcher.tool and matcher.tool != root.key.tool:
        return False
    if matcher.kind and matcher.kind != root.key.kind:
        return False
    site = root.key.site
    if not _found(matcher.site, site, site.rsplit("/", 1)[-1]):
        return False
    return _found(matcher.kernel, root.key.function, *root.kernels)


def abort_match(matcher: Matcher, root: Root) -> bool:
    if matcher.type != "abort" or not root.is_abort:
        return False
    kind = root.key.kind[len(ABORT) + 1:]
    if matcher.kind and matcher.kind != kind:
        return False
    message = (root.example or {}).get("message")
    return _found(matcher.message, message, root.key.site)


def match_roots(roots: Iterable[Root], entries: Iterable[Entry]) -> None:
    """Set each root's ``known`` (the first entry, in registry order, one of whose signatures
    matches it) and ``matched_by`` (which signature, in words); leave new roots unmarked."""
    entries = list(entries)
    for root in roots:
        for entry in entries:
            hit = next((m for m in entry.signature if sanitizer_match(m, root) or abort_match(m, root)), None)
            if hit is not None:
                root.known = entry.id
                root.matched_by = describe(hit)
                break


def describe(matcher: Matcher) -> str:
    if matcher.type == "abort":
        return f"abort {matcher.kind or 'any kind'} /{matcher.message or ''}/"
    parts = [matcher.tool or "any tool", matcher.kind or "any kind"]
    if matcher.site:
        parts.append(f"site /{matcher.site}/")
    if matcher.kernel:
        parts.append(f"kernel /{matcher.kernel}/")
    return " ".join(parts)
