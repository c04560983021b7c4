"""A package face whose names load on first use (PEP 562), as kvdiag.controls does.

A face names a package's entry points without importing them: ``python -m`` of one of its
modules, and ``kvdiag list``, do not pay for (or cycle through) the rest of the package.
"""

from __future__ import annotations

import importlib
import sys
from typing import Callable, Mapping


def lazy_face(package: str, exports: Mapping[str, str]) -> tuple[list[str], Callable, Callable]:
    """``__all__``, ``__getattr__`` and ``__dir__`` for ``package``: each name of ``exports``
    is taken from ``package.<module>`` the first time it is asked for, then kept."""

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return sorted(exports), __getattr__, __dir__
