"""Every tutorial runs, in its fast mode, from a fresh process."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9]*.py"))


@pytest.mark.parametrize("script", TUTORIALS, ids=lambda p: p.name)
def test_tutorial_runs(script):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script), "--fast"], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    if script.name == "01_first_density.py":
        assert "test log-likelihood" in done.stdout
        assert "reloaded model gives the same log_prob: True" in done.stdout
    if script.name == "05_multi_worker.py":  # two workers, one set of mirrored weights
        result = json.loads(done.stdout[done.stdout.index("{"):])
        assert result["replicas"] == 2 and result["epochs"] == 3
        first, second = result["worker_log_likelihoods"]
        assert first == second and math.isfinite(first)


def test_there_are_tutorials():
    assert TUTORIALS
