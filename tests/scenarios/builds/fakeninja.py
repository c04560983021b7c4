"""The shared part of the stand-in ninjas (not a program itself).

``ninja -C DIR -t query SRC...`` answers as ninja does: each source of the staged
tree with the object it compiles to, or ``unknown target`` (exit 1) for a file
that is absent or named in ``$FAKE_NINJA_NOT_COMPILED``. Any other call is a
build of the objects on the command line, handed to the scenario's ``build``.
"""
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def object_for(source: str) -> str:
    return f"ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/template-instances/{Path(source).name}.o"


def main(build) -> None:
    args = sys.argv[1:]
    build_dir = Path(args[args.index("-C") + 1]) if "-C" in args else Path.cwd()
    if "-t" in args and args[args.index("-t") + 1] == "query":
        not_compiled = os.environ.get("FAKE_NINJA_NOT_COMPILED", "").split(",")
        for source in args[args.index("-t") + 2:]:
            if not Path(source).is_file() or Path(source).name in not_compiled:
                print(f"ninja: error: unknown target '{source}'", file=sys.stderr)
                sys.exit(1)
            print(f"{source}:\n  outputs:\n    {object_for(source)}")
        sys.exit(0)
    objects = [a for a in args if a.endswith(".o")]
    print(f"ninja: Entering directory `{build_dir}'", flush=True)
    sys.exit(build(build_dir, objects))
