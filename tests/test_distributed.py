"""`tf.distribute`: training under MirroredStrategy on two logical CPUs follows
the single-device run, and batch norm uses the statistics of the global batch.

Logical devices must be configured before TensorFlow starts, so the run happens
in a fresh process (`tests/scripts/mirrored_fit.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mirrored():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "scripts" / "mirrored_fit.py")],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_batch_norm_uses_the_global_batch_across_replicas(mirrored):
    assert mirrored["replicas"] == 2
    for replica_values, expected in zip(mirrored["moments"], mirrored["global_moments"], strict=True):
        for values in replica_values:  # the same on both replicas, though they hold 40 and 24 rows
            np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-6)


def test_fit_under_mirrored_strategy_follows_the_single_device_run(mirrored):
    single, distributed = mirrored["single"], mirrored["mirrored"]
    # Same global batch, weights and order; summation order differs, so not bit-equal.
    np.testing.assert_allclose(distributed["loss"], single["loss"], rtol=1e-2)
    np.testing.assert_allclose(distributed["val_loss"], single["val_loss"], rtol=1e-2)
    assert single["loss"][-1] < single["loss"][0]


def test_training_set_statistics_are_set_under_a_strategy(mirrored):
    norms = mirrored["mirrored"]["norms"]
    assert len(norms["set"]) == 3
    for (mean, var), (mean_plain, var_plain) in zip(norms["set"], norms["plain"], strict=True):
        assert not np.allclose(var, 1.0)  # set from the data, not left at the initial values
        np.testing.assert_allclose(mean, mean_plain, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(var, var_plain, rtol=1e-4)


def test_a_plain_fit_stores_the_global_batches_statistics_under_a_strategy(mirrored):
    runs = mirrored["plain_fit"]
    single, distributed = runs["single"], runs["mirrored"]
    # The MADEs start as the identity: the first batch norm sees the data (mean 5), each
    # later one the batches the one before normalised (mean 0, variance 1).
    assert not np.allclose(distributed["stored"][0][0], 0.0, atol=1.0)
    for (mean, var), (mean_single, var_single) in zip(distributed["stored"], single["stored"], strict=True):
        np.testing.assert_allclose(mean, mean_single, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(var, var_single, rtol=1e-5)
    trained = runs["mirrored_trained"]
    assert abs(trained["log_prob"] - trained["exact"]) < 0.5
