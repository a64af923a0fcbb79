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
    if script.name == "02_conditional_mnist.py":
        assert "bits/pixel" in done.stdout and "samples written to" in done.stdout
    if script.name == "03_bijectors_and_iaf.py":  # the IAF posterior has learned the target
        kl = float(done.stdout.split("final KL(q || p) ")[1].split()[0])
        assert 0 <= kl < 0.2
    if script.name == "04_save_export_serve.py":  # served by TensorFlow alone, same numbers
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["matches"] and not result["tfp_maf_imported"]
        assert result["sample_shape"] == [10_000, 2]
    if script.name == "05_multi_worker.py":  # two workers, one set of mirrored weights
        result = json.loads(done.stdout[done.stdout.index("{"):])
        assert result["replicas"] == 2 and result["epochs"] == 3
        first, second = result["worker_log_likelihoods"]
        assert first == second and math.isfinite(first)
    if script.name == "06_own_table.py":  # the raw table trains, and every score is finite
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["finite"] and math.isfinite(result["held_out_log_likelihood"])
        assert all(0.5 < auc <= 1.0 for auc in result["roc_auc"].values())
    if script.name == "07_simulation_based_inference.py":  # a posterior on the prior's box, served
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["outside_prior"] == result["served_outside_prior"] == 0 and result["session_samples"] == 1000
        assert result["served_xla_functions"] == 0  # TF Serving runs none by default
        assert result["served_log_prob_matches"] and result["served_imports"] == []
        assert 0.0 <= result["coverage_gap"] <= 1.0


def test_there_are_tutorials():
    assert TUTORIALS
