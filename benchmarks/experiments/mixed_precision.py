"""What a mixed-precision MAF reaches on the Figure 1 density, against float32.

tfp-maf refuses Keras' mixed and 16-bit dtype policies (`keras_models.density_model`).
This measures what the refusal avoids: MAF (5) of 2 x 100 on the paper's Figure 1 density,
trained the same way three times from the same start, and evaluated in float32:

* ``float32``: the library's default;
* ``mixed_bfloat16``: Keras' mixed policy on the MADEs (variables float32, matmuls and
  activations in bfloat16), with the affine maps, log-determinants, base density and loss
  in float32: the split a mixed policy would need;
* ``mixed_float16``: the same with float16.

    python benchmarks/experiments/mixed_precision.py [--steps 3000]

Writes benchmarks/results/mixed_precision/<machine kind>.json and .md (`_common.report`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common
from _common import header, report, run_info  # noqa: E402

import tfp_maf  # noqa: E402
from keras_models.data import Figure1Density  # noqa: E402

tfd, tfb = tfp.distributions, tfp.bijectors
POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


def _in_float32(made):
    """The MADE run in its policy's compute dtype, its outputs handed on in float32."""
    return lambda x: tuple(tf.cast(t, tf.float32) for t in made(x))


def train(policy: str, x_train, x_test, steps: int, seed: int = 0) -> dict:
    keras.utils.set_random_seed(seed)
    orders = ["left-to-right", "right-to-left"] * 3
    mades = [tfp_maf.MADENetwork(2, [100, 100], order=orders[i], seed=seed + i, dtype=policy) for i in range(5)]
    chain = tfb.Chain([tfp_maf.MaskedAutoregressive(_in_float32(m), name=f"maf_{i}") for i, m in enumerate(mades)])
    flow = tfd.TransformedDistribution(tfd.MultivariateNormalDiag(loc=tf.zeros(2)), chain)
    variables = [v for m in mades for v in m.trainable_variables]
    optimizer = keras.optimizers.Adam(1e-3)

    @tf.function(jit_compile=True)
    def step(batch):
        with tf.GradientTape() as tape:
            loss = -tf.reduce_mean(flow.log_prob(batch))
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    rng = np.random.default_rng(seed)
    start = time.monotonic()
    for _ in range(steps):
        loss = step(x_train[rng.integers(0, len(x_train), 100)])
    seconds = time.monotonic() - start
    log_p = np.concatenate([flow.log_prob(x_test[i : i + 1000]).numpy() for i in range(0, len(x_test), 1000)])
    finite = np.isfinite(log_p)
    return {
        "policy": policy,
        "test_log_likelihood": float(log_p[finite].mean()) if finite.any() else None,
        "two_se": float(2 * log_p[finite].std() / np.sqrt(finite.sum())) if finite.any() else None,
        "non_finite_test_points": int((~finite).sum()),
        "last_training_loss": float(loss),
        "train_seconds": round(seconds, 1),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args(argv)
    data = Figure1Density()
    x_train, x_test = data.sample(10_000, 0).astype(np.float32), data.sample(10_000, 1).astype(np.float32)
    rows = []
    for policy in POLICIES:
        rows.append(train(policy, x_train, x_test, args.steps))
        print(json.dumps(rows[-1]), flush=True)
    result = {**run_info(__file__, argv), "steps": args.steps, "batch": 100,
              "exact_expected_log_likelihood": -3.531, "rows": rows}
    return report("mixed_precision", result, markdown)


def markdown(result) -> str:
    lines = [header(result, "MAF (5) on the Figure 1 density in mixed precision, split by hand "
                    "(`benchmarks/experiments/mixed_precision.py`)"),
             f"MAF (5) of 2 x 100, {result['steps']:,} steps of Adam at batch {result['batch']}, the same start; "
             f"the exact expected log-likelihood is {result['exact_expected_log_likelihood']}.", "",
             "| policy | test log-likelihood | non-finite test points | training time (s) |", "|---|---|---|---|"]
    for r in result["rows"]:
        ll = "-" if r["test_log_likelihood"] is None else f"{r['test_log_likelihood']:.3f} +- {r['two_se']:.3f}"
        lines.append(f"| {r['policy']} | {ll} | {r['non_finite_test_points']} | {r['train_seconds']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main(sys.argv[1:])
