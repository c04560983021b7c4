"""`python -m kvdiag` runs the CLI (as the `kvdiag` command does)."""

import sys

from kvdiag.cli import main

sys.exit(main())
