"""Write the JSON Schema of every edge document kind to docs/schemas/KIND.schema.json.

    python tools/schemas.py           # rewrite the files
    python tools/schemas.py --check   # exit 1 if a file is missing or stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python tools/schemas.py` from anywhere
    sys.path.insert(0, str(ROOT))

OUT = ROOT / "docs" / "schemas"


def rendered() -> dict[Path, str]:
    """Every schema file's path and text."""
    from edge.core.documents import KINDS, schema

    return {OUT / f"{kind}.schema.json": json.dumps(schema(kind), indent=2) + "\n"
            for kind in KINDS}


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, compare) the schema files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = parser.parse_args(argv)
    stale = [p for p, text in rendered().items()
             if not p.is_file() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)} (run python tools/schemas.py)")
        return 1 if stale else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for path, text in rendered().items():
        path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
