"""A llama-server built before MTP drafting: its --help has speculative options but no draft-mtp."""

import sys

if "--help" in sys.argv[1:]:
    print("----- speculative decoding params -----")
    print("--draft-max, --draft, --draft-n N    number of tokens to draft for speculative decoding (default: 16)")
    print("--model-draft, -md FNAME             draft model for speculative decoding (default: unused)")
    sys.exit(0)
sys.exit(2)
