"""Ready at once; every completion gets HTTP 500 with llama-server's error object; the server keeps running."""
import standin


def fail(handler, body):
    handler.send_json(500, {"error": {"code": 500, "message": "failed to decode the batch", "type": "server_error"}})


args = standin.parse_args()
standin.start(args)
standin.serve(args, completion=fail)
