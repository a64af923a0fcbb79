"""Config A's `log_prob` against its kernels' storage: can skipping the masks' zeros beat
TFP with XLA by 1.5x at batch 10,000?

Both run `log_prob` at about the matmul rate counted as dense, so 1.5x needs the masks'
zeros skipped. Two measures, interleaved round by round (`_common.interleaved`):

  - the model's `log_prob` in a `tf.function` (as users call it) with the MADEs' kernels
    dense and in 2, 4 and 8 degree blocks, against TFP's MAF with XLA;
  - one MADE's three matmuls (with relu) on bare tensors: dense; in blocks with the
    activations batch-major, as the library holds them (a prefix of the units is a
    strided slice, the blocks' outputs concatenate column-wise: copies of the 10,000-row
    activations at every layer); and in blocks with the activations feature-major
    (``[units, batch]``: the prefix is a contiguous slice, the outputs stack as rows);
    and in blocks kept apart (each layer's output blocks are the next layer's inputs as
    separate tensors, never sliced or concatenated: output block ``c`` is the sum of one
    matmul per input block it sees, so the copies become additions).

A third table gives the matmul rate of one block against its width at batch 10,000: the
ceiling of any layout that splits a 512-unit layer into blocks.

    python benchmarks/experiments/log_prob_blocks.py
    python benchmarks/experiments/log_prob_blocks.py --rounds 2 --points 20000   # a smoke run

Writes benchmarks/results/log_prob_blocks/<machine kind>.json and .md (`_common.report`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _common import (  # noqa: E402
    MATMUL_FLOPS,
    MIN_ROUNDS,
    batches,
    header,
    interleaved,
    matmul_run,
    normal_data,
    report,
    run_info,
    tfp_peer,
)

import keras_models as km  # noqa: E402
from keras_models import training  # noqa: E402
from tfp_maf.layers import MADENetwork  # noqa: E402
from tfp_maf.layers.block_layout import BlockLayout  # noqa: E402

D, HIDDEN, BATCH = 43, [512, 512], 10_000
BLOCKS = (2, 4, 8)  # the model's storage
CHAIN_BLOCKS = (2, 4, 8, 16)


def model_fns() -> dict:
    """``log_prob`` of MAF (5) with each storage, and TFP's MAF under XLA."""
    fns = {}
    for g in (1, *BLOCKS):
        model = training.compile_as_paper(km.MAF(D, hidden_units=HIDDEN, num_layers=5, seed=0, kernel_blocks=g))
        model.set_batch_norm_statistics(normal_data(D, 1000).numpy())
        fns["dense" if g == 1 else f"{g} blocks"] = tf.function(lambda x, m=model: m.log_prob(x))
    flow, _ = tfp_peer(D, HIDDEN)
    fns["TFP with XLA"] = tf.function(flow.log_prob, jit_compile=True)
    return fns


def chain_fns() -> dict:
    """One MADE's matmul chain, dense and in blocks in either activation layout."""
    rng = np.random.default_rng(0)
    masks = [layer.mask for layer in MADENetwork(D, HIDDEN, seed=0, kernel_blocks=1).hidden_layers]
    masks.append(MADENetwork(D, HIDDEN, seed=0, kernel_blocks=1).output_layer.mask)
    dense = [tf.constant(rng.normal(0, 0.05, m.shape).astype(np.float32) * m) for m in masks]

    def relu_between(i, h):
        return tf.nn.relu(h) if i < len(masks) - 1 else h

    @tf.function
    def chain(x):
        for i, w in enumerate(dense):
            x = relu_between(i, x @ w)
        return x

    fns = {"dense": chain}
    for g in CHAIN_BLOCKS:
        layouts = [BlockLayout.of(m, g) for m in masks]
        blocks = [[tf.constant(rng.normal(0, 0.05, s).astype(np.float32)) for s in lay.shapes] for lay in layouts]

        @tf.function
        def batch_major(x, layouts=layouts, blocks=blocks):
            for i, (lay, ws) in enumerate(zip(layouts, blocks, strict=True)):
                x = relu_between(i, tf.concat([x[:, :k] @ w for k, w in zip(lay.depths, ws, strict=True)], 1))
            return x

        @tf.function
        def feature_major(x, layouts=layouts, blocks=blocks):
            h = tf.transpose(x)
            for i, (lay, ws) in enumerate(zip(layouts, blocks, strict=True)):
                parts = [tf.matmul(w, h[:k], transpose_a=True) for k, w in zip(lay.depths, ws, strict=True)]
                h = relu_between(i, tf.concat(parts, 0))
            return tf.transpose(h)

        @tf.function
        def apart(x, layouts=layouts, blocks=blocks):
            parts, cuts = [x], [0, D]  # the input blocks and where they start and end
            for i, (lay, ws) in enumerate(zip(layouts, blocks, strict=True)):
                outs = []
                for k, w in zip(lay.depths, ws, strict=True):
                    used = [j for j in range(len(parts)) if cuts[j] < k]
                    # Zero rows to the end of the last input block used, which k may cut.
                    w = tf.pad(w, [[0, cuts[used[-1] + 1] - k], [0, 0]])
                    outs.append(relu_between(i, tf.add_n([parts[j] @ w[cuts[j]:cuts[j + 1]] for j in used])))
                parts, cuts = outs, [int(e) for e in lay.edges]
            return tf.concat(parts, 1)

        fns[f"{g} blocks, batch-major"], fns[f"{g} blocks, feature-major"] = batch_major, feature_major
        fns[f"{g} blocks, kept apart"] = apart
    return fns


BLOCK_WIDTHS = (512, 256, 128, 64)
BLOCK_POINTS = 10 * BATCH  # ten batches a timed run: one matmul alone is too short to time


def block_rate_fns() -> dict:
    """``[BATCH, w] @ [w, w]`` for each block width ``w``: a block's matmul alone."""
    rng = np.random.default_rng(0)
    fns = {}
    for w in BLOCK_WIDTHS:
        kernel = tf.constant(rng.normal(size=(w, w)).astype(np.float32))
        fns[w] = tf.function(lambda x, kernel=kernel: x @ kernel)
    return fns


def markdown(result) -> str:
    lines = [header(result, "Config A's `log_prob` against the kernels' storage "
                    "(`benchmarks/experiments/log_prob_blocks.py`)"),
             f"Batches of {BATCH:,}, medians of {result['rounds']} interleaved rounds.", ""]
    for title, key, unit in (("MAF (5) `log_prob`", "log_prob", "points/s"),
                             ("one MADE's three matmuls", "chain", "ms a batch")):
        ref = result[key]["dense"]["median_s"]
        lines += [f"| {title} | {unit} | against dense |", "|---|---|---|"]
        for name, t in result[key].items():
            value = result["points"] / t["median_s"] if key == "log_prob" else 1000 * t["median_s"]
            lines.append(f"| {name} | {value:,.0f} | {ref / t['median_s']:.2f}x |" if key == "log_prob"
                         else f"| {name} | {value:.2f} | {ref / t['median_s']:.2f}x |")
        lines.append("")
    lines += ["| one block's matmul, `[10,000, w] x [w, w]` | GFLOP/s | against w = 512 |", "|---|---|---|"]
    rates = {w: 2 * BLOCK_POINTS * int(w) ** 2 / t["median_s"] / 1e9 for w, t in result["block_rate"].items()}
    lines += [f"| w = {w} | {r:.0f} | {r / rates[str(BLOCK_WIDTHS[0])]:.2f} |" for w, r in rates.items()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--out", default=None, help="the .json to write (default: see above)")
    args = parser.parse_args(argv)
    points = normal_data(D, args.points, seed=3)
    runs = {k: batches(fn, points, BATCH) for k, fn in model_fns().items()}
    runs["matmul"] = matmul_run()
    log_prob = interleaved(runs, args.rounds)
    matmul = log_prob.pop("matmul")
    x = points[:BATCH]
    chain = interleaved({k: batches(fn, x, BATCH) for k, fn in chain_fns().items()}, args.rounds)
    widths = {str(w): batches(fn, normal_data(w, BLOCK_POINTS), BATCH) for w, fn in block_rate_fns().items()}
    block_rate = interleaved(widths, args.rounds)
    result = {**run_info(__file__, argv, MATMUL_FLOPS / matmul["median_s"] / 1e9), "rounds": args.rounds,
              "points": args.points, "log_prob": log_prob, "chain": chain, "block_rate": block_rate}
    return report("log_prob_blocks", result, markdown, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
