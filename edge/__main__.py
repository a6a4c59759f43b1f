"""Allow ``python -m edge``."""

from edge.cli import forget_inner_interrupts, main

status = main()
forget_inner_interrupts()  # the status edge chose, not CPython's own after a Ctrl-C
raise SystemExit(status)
