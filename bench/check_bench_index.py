#!/usr/bin/env python3
"""Check that docs/benchmarks.md, the index of the benchmark pages, lists every page of
docs/bench/ and links to no page that does not exist.

    python bench/check_bench_index.py        # exit status 0 when the index is complete

The pages themselves are written by hand (or by their benchmark's own script); the index only
links them, so that no result is kept in two places.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def problems(root: Path = None) -> list:
    """What is wrong with the index, one sentence each (empty when it is complete)."""
    root = root or ROOT
    index = root / "docs" / "benchmarks.md"
    if not index.is_file():
        return [f"{index.relative_to(root)}: missing"]
    linked = set(re.findall(r"\]\(bench/([^)#\s]+\.md)(?:#[^)]*)?\)", index.read_text()))
    pages = {p.name for p in (root / "docs" / "bench").glob("*.md")}
    out = [f"docs/benchmarks.md: no link to docs/bench/{n}" for n in sorted(pages - linked)]
    out += [f"docs/benchmarks.md: links to docs/bench/{n}, which does not exist"
            for n in sorted(linked - pages)]
    return out


def main() -> int:
    found = problems()
    for p in found:
        print(p, file=sys.stderr)
    if not found:
        print("docs/benchmarks.md lists every page of docs/bench/")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
