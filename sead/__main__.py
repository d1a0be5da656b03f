"""`python -m sead`: the `sead` command, for environments without the console script on PATH."""

import sys

from sead.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
