"""Allow ``python -m edge``."""

from edge.cli import main

raise SystemExit(main())
