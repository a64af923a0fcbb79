"""Every Python block of the README and the docs runs: on its own, in a fresh namespace,
or, when its first line starts ``# continues`` (``# continues the block above``), after
the page's blocks before it. A block whose first line starts ``# needs`` says what it
needs that a reader brings: an exported model at ``runs/maf5/saved_model``, which the
test makes (a small MAF (2)) before running the block alone; a dataset or a running
server, with which the block is compiled, not run (`tests/test_serving_runtimes.py`
runs the gRPC client against a local server). What a reader pastes into a fresh
interpreter works as the page says.

Trainings are cut to two epochs (their figures are not what is checked here) and each
page runs in a temporary directory.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
CONTINUES, NEEDS = "# continues", "# needs"
SAVED_MODEL = "runs/maf5/saved_model"


def blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), re.S)


def _export_a_small_model(path: Path) -> None:
    if not path.exists():
        import keras_models as km

        km.MAF(2, hidden_units=[8], num_layers=2, seed=0).export(str(path))


def _shortened(block: str) -> str:
    block = re.sub(r"\bepochs=\d+", "epochs=2", block)
    return re.sub(r"\bmax_epochs=\d+", "max_epochs=2", block)


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)])
def test_every_block_runs_alone_or_after_the_blocks_it_says_it_continues(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = None
    for i, block in enumerate(blocks(page)):
        where = f"{page}, block {i + 1}"
        if block.startswith(NEEDS) and not block.startswith(f"{NEEDS} {SAVED_MODEL}"):
            compile(block, where, "exec")
            continue
        if block.startswith(NEEDS):
            _export_a_small_model(tmp_path / SAVED_MODEL)
            namespace = {"__name__": "__main__"}
        elif block.startswith(CONTINUES):
            assert namespace is not None, f"{where} continues, but no block runs before it"
        else:
            namespace = {"__name__": "__main__"}
        try:
            exec(compile(_shortened(block), where, "exec"), namespace)
        except Exception as err:
            raise AssertionError(f"{where} fails: {type(err).__name__}: {err}\n{block}") from err
