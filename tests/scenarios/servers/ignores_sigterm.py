"""Completes requests, but ignores SIGTERM: only SIGKILL ends it."""
import signal

import standin

args = standin.parse_args()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
standin.start(args)
standin.serve(args)
