"""The one jinja2 environment registry templates are rendered and parsed in.

A registry entry may come from a fork under review: rendering its argv must never
run its code. Templates render in jinja2's ImmutableSandboxedEnvironment (no
underscore attributes, no mutation of the context) with the environment's
globals removed (``cycler``, ``joiner``, ``namespace``, ``lipsum``, ``range``,
``dict``): a template sees the context kvdiag passes and nothing else.
`registry lint` reports what the sandbox would refuse (:func:`forbidden_reaches`)
so an entry with a payload fails review before anything renders it.
"""

from __future__ import annotations

from typing import Any, Mapping

import jinja2
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

__all__ = ["SANDBOX", "SecurityError", "forbidden_reaches", "render_template"]

SANDBOX = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)
_STOCK_GLOBALS = frozenset(SANDBOX.globals)
SANDBOX.globals.clear()


def render_template(template: str, context: Mapping[str, Any]) -> str:
    """Render one template string; raises jinja2's UndefinedError, SecurityError or syntax errors."""
    return SANDBOX.from_string(template).render(**context)


def forbidden_reaches(template: str) -> list[str]:
    """What in ``template`` the sandbox forbids: underscore attributes, method calls on
    values, jinja2's stock globals. Raises TemplateSyntaxError when it does not parse."""
    found: list[str] = []
    tree = SANDBOX.parse(template)
    for node in tree.find_all((nodes.Getattr, nodes.Getitem, nodes.Name, nodes.Call)):
        if isinstance(node, nodes.Getattr) and node.attr.startswith("_"):
            found.append(f"attribute {node.attr!r}")
        elif (isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const)
              and isinstance(node.arg.value, str) and node.arg.value.startswith("_")):
            found.append(f"item {node.arg.value!r}")
        elif isinstance(node, nodes.Name) and node.name in _STOCK_GLOBALS:
            found.append(f"global {node.name!r}")
        elif isinstance(node, nodes.Call):
            found.append("a call")
    return list(dict.fromkeys(found))
