"""Ready at once; every completion's connection is closed without an answer, and the server keeps running."""
import standin


def close(handler, body):
    handler.close_connection = True
    handler.connection.shutdown(2)


args = standin.parse_args()
standin.start(args)
standin.serve(args, completion=close)
