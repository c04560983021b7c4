"""/health answers 503 "Loading model" for --load-seconds (default 1), then 200; completions succeed."""
import standin

args = standin.parse_args()
standin.start(args)
standin.log("srv    load_model: loading model 'standin.gguf'")
standin.serve(args, health=standin.loading_for(args.load_seconds or 1.0))
