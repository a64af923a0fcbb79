"""Builds the site strict, as .ci/run does: ``python docs/_ext/build.py``.

``zensical build --strict`` fails on Zensical's own warnings (a broken link or anchor, a
missing snippet) but only prints those of the Python extensions it runs: mkdocstrings' and
griffe's, such as a docstring naming a parameter its signature lacks. It also builds a page
missing from the nav without a word. Both fail here.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import yaml
from zensical.main import cli

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "mkdocs.yml"


class _Warnings(logging.Handler):
    """Records and prints every warning logged while the site builds."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        print(f"Warning: {record.getMessage()}", file=sys.stderr)


def _nav_pages(entry) -> set[str]:
    if isinstance(entry, str):
        return {entry}
    items = entry.values() if isinstance(entry, dict) else entry
    return set().union(*(_nav_pages(item) for item in items))


def pages_outside_the_nav() -> list[str]:
    """The pages under docs_dir that mkdocs.yml's nav does not list."""
    loader = type("Loader", (yaml.SafeLoader,), {})
    loader.add_constructor("!ENV", lambda loader, node: None)
    config = yaml.load(CONFIG.read_text(), Loader=loader)  # noqa: S506 (a SafeLoader)
    docs = ROOT / config.get("docs_dir", "docs")
    pages = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md")}
    return sorted(pages - _nav_pages(config["nav"]))


def main() -> int:
    # mkdocs.yml's paths (the snippets' base, mkdocstrings' sources) are the repository's.
    os.chdir(ROOT)
    warnings = _Warnings()
    logging.getLogger().addHandler(warnings)
    # --clean: a cached page would not run mkdocstrings again, nor warn.
    cli.main(["build", "--strict", "--clean", "--config-file", str(CONFIG)], standalone_mode=False)
    outside = [f"{page} is not in mkdocs.yml's nav" for page in pages_outside_the_nav()]
    for message in outside:
        print(f"Warning: {message}", file=sys.stderr)
    count = len(warnings.messages) + len(outside)
    if count:
        print(f"Aborted with {count} warnings in strict mode", file=sys.stderr)
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main())
