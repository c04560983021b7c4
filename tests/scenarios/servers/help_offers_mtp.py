"""A llama-server whose --help lists upstream's speculative types, draft-mtp among them.

The list is the one upstream llama-server 749f688fc printed on the device.
"""

import sys

if "--help" in sys.argv[1:]:
    print("----- speculative decoding params -----")
    print("--spec-type none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,ngram-simple,"
          "ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache")
    sys.exit(0)
sys.exit(2)
