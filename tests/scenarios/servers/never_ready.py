"""/health answers 503 "Loading model" for as long as it lives."""
import standin

args = standin.parse_args()
standin.start(args)
standin.serve(args, health=standin.loading_for(3600))
