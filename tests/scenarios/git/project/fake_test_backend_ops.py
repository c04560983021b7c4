# The body of the synthetic project's "test-backend-ops" (build.py prepends MODE).
import json
import re
import sys

mode = json.loads(MODE)  # noqa: F821 - defined by build.py
args = sys.argv[1:]
if not args or "--help" in args or args[0] != "test":
    print("usage: test-backend-ops [mode] [-o <op>] [-b <backend>] [-p <params regex>]")
    print("  valid modes:")
    print("    - test (default, compare with CPU backend for correctness)")
    print("    - perf (performance evaluation)")
    sys.exit(0 if "--help" in args else 1)
params = args[args.index("-p") + 1] if "-p" in args else ""
cases = ["hsk=256,hsv=256,nh=4,kv=512", "hsk=256,hsv=256,nh=4,kv=1024", "hsk=128,hsv=128,nh=4,kv=512"]
selected = [c for c in cases if re.search(params, c)]
print("Testing 1 devices\n")
print("Backend 1/1: CUDA0")
print("  Device description: Fake GPU")
failed = 0
for case in selected:
    if mode["divergent"] and case.startswith("hsk=256"):
        print("fake: Barrier error detected. Divergent thread(s) in block.", file=sys.stderr, flush=True)
    if mode["wrong"]:
        failed += 1
        print(f"  FLASH_ATTN_EXT({case}): [FLASH_ATTN_EXT] ERR = 1.250000000 > 0.000500000 FAIL")
    else:
        print(f"  FLASH_ATTN_EXT({case}): OK")
print(f"  {len(selected) - failed}/{len(selected)} tests passed")
print(f"  Backend CUDA0: {'FAIL' if failed else 'OK'}")
print(f"{0 if failed else 1}/1 backends passed")
print("FAIL" if failed else "OK")
sys.exit(1 if failed else 0)
