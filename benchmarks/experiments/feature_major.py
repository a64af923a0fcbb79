"""Degree blocks with the activations feature-major, inside the model and in training.

`log_prob_blocks.py` found one MADE's three matmuls 1.2x faster in 8 degree blocks when the
activations are held feature-major (``[units, batch]``: a block's inputs are a contiguous
prefix of the rows, its outputs stack as rows). Does that survive (1) inside MAF (5)'s
`log_prob`, with the biases, relus, affine maps and batch norms, and (2) in a training step,
where the backward pass splits and pads the gradients by block? Measured on config A
(D 43, MAF (5) of 2 x 512), interleaved round by round (`_common.interleaved`):

  - `log_prob` at batches of 1,000, 2,500 and 10,000: the model as shipped; the same model
    with each MADE's network run feature-major in 8 blocks (a subclass of `MADENetwork`
    below: the input and output transposed once per MADE), the bias either folded into the
    matmul as a row of ones or added after the blocks' outputs are stacked (one
    broadcast add, which the relu follows); TFP's MAF under XLA.
  - a bare training step (five MADE matmul chains, relus, a squared loss, an SGD update) at
    batch 100 and 1,000, dense against feature-major in 4 and 8 blocks, with and without XLA.

    python benchmarks/experiments/feature_major.py
    python benchmarks/experiments/feature_major.py --rounds 2   # a smoke run

Writes benchmarks/results/feature_major/<machine kind>.json and .md (`_common.report`).
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
    maf_as_paper,
    matmul_run,
    normal_data,
    report,
    run_info,
    sync,
    tfp_peer,
)

from tfp_maf.layers import MADENetwork, sublayers  # noqa: E402
from tfp_maf.layers.block_layout import BlockLayout  # noqa: E402

D, HIDDEN, BATCH, BLOCKS = 43, [512, 512], 10_000, 8
LOG_PROB_BATCHES = (1_000, 2_500, 10_000)  # each divides BATCH


def column_blocks(mask, rows, blocks):
    """With the inputs in order ``rows``, the units' order and, per group of ``blocks``
    column groups, ``(depth, lo, hi)``: the group's units ``lo:hi`` see the first ``depth``
    inputs. The staircase of `tfp_maf.layers.block_layout`, for a given input order."""
    seen = (np.asarray(mask)[rows] != 0).sum(0)
    cols = np.argsort(seen, kind="stable")
    edges = np.linspace(0, len(cols), blocks + 1).round().astype(int)
    return cols, [(int(seen[cols][hi - 1]), lo, hi) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]


class FeatureMajorMADE(MADENetwork):
    """`MADENetwork` whose forward pass runs feature-major in degree blocks (unconditional,
    dense kernels: config A's), the bias folded into each matmul as a row of ones."""

    fold_bias = True

    def flat_params(self, x2d, y_terms):
        layers = [*self.hidden_layers, self.output_layer]
        if not hasattr(self, "_plan"):
            order, self._plan = BlockLayout.of(layers[0].mask, 2).rows, []
            for layer in layers:
                cols, groups = column_blocks(layer.mask, order, BLOCKS)
                self._plan.append((order, cols, groups))
                order = cols
        ones = tf.ones([1, tf.shape(x2d)[0]], x2d.dtype)
        h = tf.transpose(tf.gather(x2d, self._plan[0][0], axis=1))
        h = tf.concat([ones, h], 0) if self.fold_bias else h
        for i, (layer, (rows, cols, groups)) in enumerate(zip(layers, self._plan, strict=True)):
            kernel = tf.gather(tf.gather(tf.convert_to_tensor(layer.kernel), rows, axis=0), cols, axis=1)
            bias = tf.gather(tf.convert_to_tensor(layer.bias), cols)
            hidden = i < len(layers) - 1
            if self.fold_bias:
                kernel = tf.concat([bias[None], kernel], 0)
                parts = [tf.matmul(kernel[: k + 1, lo:hi], h[: k + 1], transpose_a=True) for k, lo, hi in groups]
                h = self.activation(tf.concat([ones, *parts], 0)) if hidden else tf.concat(parts, 0)
            else:
                parts = [tf.matmul(kernel[:k, lo:hi], h[:k], transpose_a=True) for k, lo, hi in groups]
                h = tf.concat(parts, 0) + bias[:, None]
                h = self.activation(h) if hidden else h
        return tf.transpose(tf.gather(h, np.argsort(self._plan[-1][1]), axis=0))


class BiasAfterStackMADE(FeatureMajorMADE):
    """`FeatureMajorMADE` with the bias added after the blocks' outputs are stacked."""

    fold_bias = False


def log_prob_fns() -> dict:
    """`log_prob` of the shipped model, of the same weights run feature-major (the bias
    folded in, and added after the stack), and TFP's."""
    model = maf_as_paper(D, HIDDEN)
    flow, _ = tfp_peer(D, HIDDEN)
    rng = np.random.default_rng(0)
    for made in _mades(model):
        # Random weights (the output kernels start at zero), projected onto the masks.
        made.set_weights([rng.normal(0, 0.05, w.shape).astype(np.float32) for w in made.get_weights()])
    model.set_batch_norm_statistics(normal_data(D, 1000).numpy())
    out = {"as shipped": tf.function(lambda x: model.log_prob(x))}
    for cls, name in ((FeatureMajorMADE, "bias folded in"), (BiasAfterStackMADE, "bias added after the stack")):
        twin = maf_as_paper(D, HIDDEN)
        for mine, theirs in zip(_mades(twin), _mades(model), strict=True):
            mine.__class__ = cls  # the same layer, its forward pass swapped
            mine.set_weights(theirs.get_weights())
        twin.set_batch_norm_statistics(normal_data(D, 1000).numpy())
        out[f"feature-major, {BLOCKS} blocks, {name}"] = tf.function(lambda x, twin=twin: twin.log_prob(x))
    return {**out, "TFP with XLA": tf.function(flow.log_prob, jit_compile=True)}


def _mades(model):
    return [layer for layer in sublayers(model) if isinstance(layer, MADENetwork)]


def train_fns(batch: int) -> dict:
    """A bare training step of five MADE chains, dense and feature-major in blocks."""
    rng = np.random.default_rng(0)
    made = MADENetwork(D, HIDDEN, seed=0, kernel_blocks=1)
    masks = [layer.mask for layer in made.hidden_layers] + [made.output_layer.mask]
    xt = tf.constant(rng.normal(size=(D, batch)).astype(np.float32))
    fns = {}
    for g in (1, 4, 8):
        chains = []
        for _ in range(5):
            order, chain = BlockLayout.of(masks[0], 2).rows, []
            for mask in masks:
                cols, groups = column_blocks(mask, order, g)
                chain.append([(k, tf.Variable(rng.normal(0, 0.05, (hi - lo, max(k, 1))).astype(np.float32)))
                              for k, lo, hi in groups])
                order = cols
            chains.append(chain)
        variables = [w for chain in chains for layer in chain for _, w in layer]

        def step(xt=xt, chains=chains, variables=variables):
            with tf.GradientTape() as tape:
                h = xt
                for chain in chains:
                    for i, layer in enumerate(chain):
                        h = tf.concat([tf.matmul(w, h[:k]) for k, w in layer], 0)
                        h = tf.nn.relu(h) if i < len(chain) - 1 else h[:D]
                loss = tf.reduce_sum(h**2)
            for v, grad in zip(variables, tape.gradient(loss, variables), strict=True):
                v.assign_sub(1e-9 * grad)
            return loss

        name = "dense" if g == 1 else f"feature-major, {g} blocks"
        fns[name] = tf.function(step)
        fns[f"{name}, XLA"] = tf.function(step, jit_compile=True)
    return fns


def markdown(result) -> str:
    lines = [header(result, "Degree blocks with the activations feature-major "
                    "(`benchmarks/experiments/feature_major.py`)"),
             f"Config A, medians of {result['rounds']} interleaved rounds.", "",
             f"| MAF (5) `log_prob`, {BATCH:,} points | points/s | against as shipped |", "|---|---|---|"]
    for batch, timings in result["log_prob"].items():
        ref = timings["as shipped"]["median_s"]
        lines.append(f"| **batches of {int(batch):,}** | | |")
        for name, t in timings.items():
            lines.append(f"| {name} | {BATCH / t['median_s']:,.0f} | {ref / t['median_s']:.2f}x |")
    for batch, timings in result["train"].items():
        lines += ["", f"| bare training step, batch {batch} | examples/s | against dense, the same XLA |",
                  "|---|---|---|"]
        for name, t in timings.items():
            base = timings["dense, XLA" if name.endswith("XLA") else "dense"]["median_s"]
            lines.append(f"| {name} | {int(batch) / t['median_s']:,.0f} | {base / t['median_s']:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    parser.add_argument("--out", default=None, help="the .json to write (default: see above)")
    args = parser.parse_args(argv)
    x = normal_data(D, BATCH, seed=3)
    fns = log_prob_fns()
    ref = fns["as shipped"](x)
    gap = max(float(tf.reduce_max(tf.abs(fn(x) - ref))) for name, fn in fns.items() if name.startswith("feature"))
    log_prob = {}
    for batch in LOG_PROB_BATCHES:
        runs = {k: batches(fn, x, batch) for k, fn in fns.items()}
        runs["matmul"] = matmul_run()
        log_prob[str(batch)] = interleaved(runs, args.rounds)
        matmul = log_prob[str(batch)].pop("matmul")
    train = {}
    for batch in (100, 1000):
        steps = {k: (lambda fn=fn: [fn() for _ in range(10)][-1]) for k, fn in train_fns(batch).items()}
        timings = interleaved({k: _synced(f) for k, f in steps.items()}, args.rounds)
        train[str(batch)] = {k: {**t, "median_s": t["median_s"] / 10} for k, t in timings.items()}
    result = {**run_info(__file__, argv, MATMUL_FLOPS / matmul["median_s"] / 1e9), "rounds": args.rounds,
              "log_prob_max_abs_difference": gap, "log_prob": log_prob, "train": train}
    return report("feature_major", result, markdown, args.out)


def _synced(run):
    def timed():
        sync(run())

    timed()  # traces
    return timed


if __name__ == "__main__":
    main(sys.argv[1:])
