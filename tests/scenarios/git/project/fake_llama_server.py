# The body of the synthetic project's "llama-server" (build.py prepends MODE and STANDIN).
# It is a stand-in of tests/scenarios/servers (standin.py) shaped like D3's run: it prints a
# host KV buffer line at start-up and, per completion, a "draft acceptance" line with accepted
# drafts; built from a kernel.txt whose barrier is "divergent" its first completion dies the
# way ggml dies on a CUDA illegal memory access (SIGABRT), otherwise it answers.
import json
import sys

sys.path.insert(0, STANDIN)  # noqa: F821 - defined by build.py
import standin  # noqa: E402

mode = json.loads(MODE)  # noqa: F821 - defined by build.py
args = standin.parse_args()
standin.start(args)
standin.log("llama_kv_cache:        CPU KV buffer size =     4.25 MiB")


def complete(handler, body):
    n = int(body.get("n_predict", 16))
    accepted = (3 * n) // 4
    standin.log(f"slot print_timing: id  0 | task 0 | draft acceptance = {accepted / n:.5f} "
                f"({accepted:5d} accepted / {n:5d} generated), mean len =  3.34")
    handler.send_json(200, standin.completion_doc(body, draft_n=n, draft_n_accepted=accepted))


standin.serve(args, completion=standin.crash if mode["divergent"] else complete)
