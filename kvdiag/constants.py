"""Facts about the outside world that several layers need, written once.

Kept free of imports so that the CLI, the registry schema and the parsers can
all read them without pulling in the layers that act on them.
"""

# compute-sanitizer's tools, in the order kvdiag lists them (the registry's `tool`
# values, the doctor's controls, the parser's report kinds, `--tool` choices).
SANITIZER_TOOLS: tuple[str, ...] = ("memcheck", "racecheck", "synccheck", "initcheck")
