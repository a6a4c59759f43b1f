"""``python -m partition.cloud``: serve with the options read as JSON from stdin (see
:func:`partition.serve.serve`, which starts this so the token never appears in argv)."""

from __future__ import annotations

import sys

from partition.serve import main

if __name__ == "__main__":
    sys.exit(main())
