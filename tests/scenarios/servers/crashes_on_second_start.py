"""Counts its starts in the --state file; on the second start the completion crashes like crashes_mid_request."""
import standin

args = standin.parse_args()
count = 0
try:
    with open(args.state) as f:
        count = int(f.read().strip() or 0)
except FileNotFoundError:
    pass
count += 1
with open(args.state, "w") as f:
    f.write(f"{count}\n")
standin.start(args)
standin.serve(args, completion=standin.crash if count == 2 else None)
