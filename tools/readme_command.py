"""Print the README's Nth command (1-based), exactly as written: the Nth line of its first ```sh
block that is neither blank nor a comment. `.ci/run` runs the first one, as written, before
anything else (tests/test_ci_policy.py checks that its line is this one)."""

from __future__ import annotations

import sys
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def commands(text: str) -> list[str]:
    """The command lines of the first ```sh block."""
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def main(argv: list[str]) -> int:
    index = int(argv[1]) if len(argv) > 1 else 1
    print(commands(README.read_text())[index - 1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
