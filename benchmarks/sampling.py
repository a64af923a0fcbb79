"""Sampling time against D: mask-aware sampling vs the plain D-pass loop, one MAF layer.

For a MADE of 1 x 1024 relu units (fixed hidden size) and D = 8, 43, 63, 784, times in
one run, float32, inside `tf.function`, medians of ``--repeats`` with min and max:

- ``log_prob`` of ``--n`` points (one pass),
- drawing ``--n`` samples with tfp-maf's mask-aware pass (`tfp_maf.sampling`),
- the same pass without XLA (`tfp_maf.sampling.without_xla`), as an exported SavedModel
  samples (TF Serving runs no XLA by default),
- drawing them with the plain loop that re-runs the whole MADE D times (what TFP, nflows,
  zuko and the paper's code do; here our own `_plain_forward`, the same maths),

``benchmarks/speed.py`` compares with TFP's own MAF.

    python benchmarks/sampling.py [--n 1000] [--repeats 3]

Writes benchmarks/results/sampling/<machine kind>.json and .md (`_common.report`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _common import header, report, run_info  # noqa: E402

from tfp_maf import MADENetwork, MaskedAutoregressive  # noqa: E402
from tfp_maf.sampling import without_xla  # noqa: E402
from tfp_maf.testing import randomize_weights  # noqa: E402


def _time(fn, *args, repeats):
    fn(*args)  # trace and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(*args)
        tf.nest.map_structure(lambda t: t.numpy(), out)
        times.append(time.perf_counter() - start)
    return {"median_s": float(np.median(times)), "min_s": min(times), "max_s": max(times)}


def measure(D, hidden, n, repeats, plain_limit):
    made = MADENetwork(D, [hidden], seed=0)
    randomize_weights(made, seed=0, scale=0.3 / np.sqrt(max(D, hidden)))
    b = MaskedAutoregressive(made)
    u = tf.random.stateless_normal([n, D], seed=[0, 1])
    row = {"D": D, "hidden": hidden, "n": n}
    row["log_prob"] = _time(tf.function(lambda x: b.inverse_log_det_jacobian(x, event_ndims=1)), u, repeats=repeats)
    row["mask_aware_sample"] = _time(tf.function(lambda u: b._mask_aware_forward(u, None)), u, repeats=repeats)
    row["without_xla_sample"] = _time(tf.function(lambda u: _without_xla(b, u)), u, repeats=repeats)
    if D <= plain_limit:
        row["plain_sample"] = _time(tf.function(lambda u: b._plain_forward(u, None)), u, repeats=repeats)
    return row


def _without_xla(bijector, u):
    with without_xla():
        return bijector._mask_aware_forward(u, None)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plain-limit", type=int, default=784, help="largest D to time the plain loop at")
    parser.add_argument("--out", default=None, help="the .json to write (default: see above)")
    args = parser.parse_args(argv)
    rows = [measure(D, args.hidden, args.n, args.repeats, args.plain_limit) for D in (8, 43, 63, 784)]
    result = {**run_info(__file__, argv), "rows": rows}
    return report("sampling", result, markdown, args.out)


def markdown(result) -> str:
    first = result["rows"][0]
    lines = [header(result, "Mask-aware sampling against the D-pass loop (`benchmarks/sampling.py`)"),
             f"One MADE layer of 1 x {first['hidden']} relu units, {first['n']:,} samples, inside `tf.function`, "
             "medians.", "",
             "| D | `log_prob` (s) | mask-aware sampling (s) | the same without XLA (s) | D-pass sampling (s) "
             "| D-pass / mask-aware | mask-aware / `log_prob` |", "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lp, fast = r["log_prob"]["median_s"], r["mask_aware_sample"]["median_s"]
        plain = r.get("plain_sample", {}).get("median_s")
        without_xla_s = r["without_xla_sample"]["median_s"]
        lines.append(f"| {r['D']} | {lp:.4f} | {fast:.4f} | {without_xla_s:.4f} | "
                     f"{'-' if plain is None else f'{plain:.3f}'} | "
                     f"{'-' if plain is None else f'{plain / fast:.1f}x'} | {fast / lp:.1f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main(sys.argv[1:])
