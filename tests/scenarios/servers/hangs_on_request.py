"""Ready at once; a completion is accepted and never answered."""
import standin

args = standin.parse_args()
standin.start(args)
standin.serve(args, completion=standin.hang)
