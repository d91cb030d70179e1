#!/usr/bin/env python3
"""Print one of the README's two set-up commands ("run" or "test").

The README is the single source: CI runs exactly what a user copies from it.
The commands are the lines after the markers `<!-- cmd:run -->` / `<!-- cmd:test -->`
inside the following ```sh block.
"""

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def command(name: str, text: str | None = None) -> str:
    text = README.read_text(encoding="utf-8") if text is None else text
    m = re.search(rf"<!-- cmd:{name} -->\s*```sh\n(.*?)\n```", text, re.S)
    if not m:
        raise SystemExit(f"README.md has no `<!-- cmd:{name} -->` command block")
    lines = [l for l in m.group(1).splitlines() if l.strip() and not l.lstrip().startswith("#")]
    if len(lines) != 1:
        raise SystemExit(f"the {name} command must be one line, found {len(lines)}")
    return lines[0].strip()


if __name__ == "__main__":
    print(command(sys.argv[1] if len(sys.argv) > 1 else "test"))
