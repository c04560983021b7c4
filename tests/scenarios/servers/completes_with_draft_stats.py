"""Completes every request with timings and speculative-decoding counters (draft_n, draft_n_accepted)."""
import standin


def complete(handler, body):
    n = int(body.get("n_predict", 16))
    handler.send_json(200, standin.completion_doc(body, draft_n=n, draft_n_accepted=(3 * n) // 4))


args = standin.parse_args()
standin.start(args)
standin.serve(args, completion=complete)
