"""Training time against the MADEs' kernel blocks: what ``kernel_blocks="auto"`` rests on.

`tfp_maf.MaskedDense` can store a MADE kernel in ``G`` degree blocks
(`tfp_maf.layers.block_layout`): fewer multiply-adds and optimizer entries, but ``G``
smaller matmuls and a gather of the inputs and outputs. Whether that pays depends on the
layer's size. This script trains MAF (5), and MADE MoG at MNIST sizes, on N(0, I) data
with every MADE layer in
``G = 1`` (dense), 2, 4, 8 and 16 blocks, on the path users take (`compile_as_paper`,
then `model.fit` from the library's shuffled pipeline), the settings interleaved round by
round so that a neighbour's load falls on all of them alike; figures are medians of the
rounds, in ms per step.

  - MNIST sizes: D 784, 1 x 1,024 units (the paper's), batch 100 and 1,000; MADE MoG
    (10 components: an output layer of 1,024 x 23,520) at batch 100;
  - config A of `speed.py`: D 43, 2 x 512 units, batch 100 and 1,000.

"auto" (`MADENetwork`, `tfp_maf.layers.block_layout.auto_blocks`) blocks a layer of at
least 2^19 kernel entries in 4 blocks, and one of at least 2^22 in 8, each of at least 128
units: MNIST MAF (5)'s layers in 4, MADE MoG's hidden layer in 4 and its output layer in 8,
config A's (512 x 512, 2^18) dense. ``--blocks auto`` times that choice beside the others.

    python benchmarks/block_sizes.py
    python benchmarks/block_sizes.py --rounds 3 --blocks 1 8 auto   # a smoke run

Writes benchmarks/results/block_sizes/<machine kind>.json and .md (`_common.report`).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from _common import fit_rounds, header, report, run_info, whole_executions  # noqa: E402

import keras_models as km  # noqa: E402
import tfp_maf  # noqa: E402
from keras_models import data, training  # noqa: E402
from tfp_maf.layers import sublayers

#: (name, D, hidden units, batch, steps a timed `fit` call): about a second of training each.
CASES = (("mnist", 784, [1024], 100, 50), ("mnist", 784, [1024], 1000, 10), ("mnist MADE MoG", 784, [1024], 100, 20),
         ("A", 43, [512, 512], 100, 200), ("A", 43, [512, 512], 1000, 20))


def _stored_share(model) -> float:
    """The kernels' stored entries against the dense ones."""
    layers = [layer for layer in sublayers(model) if isinstance(layer, tfp_maf.MaskedDense)]
    dense = sum(layer.mask.size for layer in layers)
    return sum(layer.mask.size if layer.layout is None else layer.layout.stored for layer in layers) / dense


def _model(name, D, hidden, blocks):
    """MAF (5), or MADE MoG for a case so named, compiled as the paper trains it; ``blocks``
    an int or ``"auto"``."""
    if "MADE MoG" in name:
        model = km.MADEMoG(D, hidden_units=hidden, num_components=10, seed=0, kernel_blocks=blocks)
        return training.compile_as_paper(model, "made_mog")
    model = km.MAF(D, hidden_units=hidden, num_layers=5, seed=0, kernel_blocks=blocks)
    return training.compile_as_paper(model, "maf5")


def case_times(name, D, hidden, batch, steps, blocks, rounds) -> dict:
    x = np.random.default_rng(0).standard_normal((batch * steps, D)).astype(np.float32)
    ds = data.array_dataset(x, batch_size=batch, shuffle=True, seed=0).repeat()
    models = {}
    for g in blocks:
        model = _model(name, D, hidden, g)
        steps = whole_executions(steps, int(model.steps_per_execution))
        model.fit(ds, steps_per_epoch=int(model.steps_per_execution), epochs=1, verbose=0)  # compile
        models[g] = model
    times = fit_rounds(models, ds, steps, rounds)
    return {str(g): {**times[g], "stored_share": _stored_share(models[g])} for g in blocks}


def markdown(result) -> str:
    lines = [
        header(result, "MAF (5) and MADE MoG training time against the MADEs' kernel blocks "
               "(`benchmarks/block_sizes.py`)"),
        f"`fit` after `compile_as_paper`, medians of {result['rounds']} interleaved rounds.",
        "",
        "| case | blocks | ms per step (min) | against dense | kernel entries stored | host steal |",
        "|---|---|---|---|---|---|",
    ]
    for case in result["cases"]:
        dense = case["times"]["1"]["ms_per_step"]
        for g, t in case["times"].items():
            lines.append(
                f"| {case['name']}, batch {case['batch']} | {g} | {t['ms_per_step']:.1f} ({t['min_ms_per_step']:.1f}) "
                f"| {dense / t['ms_per_step']:.2f}x | {100 * t['stored_share']:.0f}% | {100 * t['host_steal']:.0f}% |"
            )
    return "\n".join(lines) + "\n"


def _blocks(text: str):
    return text if text == "auto" else int(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=_blocks, nargs="+", default=[1, 2, 4, 8, 16, "auto"],
                        help="block counts, or auto (the default's choice per layer)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=None, help="the .json to write (default: see above)")
    args = parser.parse_args(argv)
    # Dense, the reference, first; "auto" last.
    blocks = sorted(set(args.blocks) | {1}, key=lambda g: (g == "auto", 0 if g == "auto" else g))
    cases = []
    for name, D, hidden, batch, steps in CASES:
        # A process per case: TF keeps what every model traced, and the five MADE MoGs
        # (24M-entry output kernels, Adam's state) after ten MNIST MAFs filled 24 GiB.
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            times = pool.submit(case_times, name, D, hidden, batch, steps, blocks, args.rounds).result()
        cases.append({"name": name, "D": D, "hidden": hidden, "batch": batch, "times": times})
        print(f"{name} b{batch}: " + ", ".join(f"{g} blocks {t['ms_per_step']:.1f} ms" for g, t in times.items()),
              flush=True)
    result = {**run_info(__file__, argv), "rounds": args.rounds, "cases": cases}
    return report("block_sizes", result, markdown, args.out)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
