"""A griffe extension for the API reference: doctests written flush left in a docstring
(``Example:``, a blank line, then ``>>>`` lines, which pytest's ``--doctest-modules`` runs)
are shown as Python console code blocks.

Google-style parsing reads such an ``Example:`` as prose, and Markdown would then run the
doctest's lines together into a paragraph. Docstrings need not change for the site.
"""

from __future__ import annotations

import griffe

_CONTINUATION = ("...",)


def fence_doctests(text: str) -> str:
    """``text`` with every flush-left run of doctest groups wrapped in a ```` ```pycon ```` fence.

    A group starts at a ``>>>`` line and ends at a blank line; the run ends at the first
    non-blank line after a blank one that does not start a new group.
    """
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith(">>>"):
            out.append(lines[i])
            i += 1
            continue
        block: list[str] = []
        while i < len(lines):
            if lines[i].strip():
                block.append(lines[i])
                i += 1
                continue
            # A blank line: the run goes on only if another group follows.
            j = i
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and lines[j].startswith(">>>"):
                block.extend([""] * (j - i))
                i = j
                continue
            break
        out += ["```pycon", *block, "```"]
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
