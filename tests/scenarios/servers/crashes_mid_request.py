"""Ready at once; the first completion prints ggml's CUDA illegal-memory-access block and calls os.abort()."""
import standin

args = standin.parse_args()
standin.start(args)
standin.serve(args, completion=standin.crash)
