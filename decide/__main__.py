"""`python -m decide` is the `decide` console script."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
