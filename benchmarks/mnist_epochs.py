"""Seconds per MNIST epoch on the path users take: `compile_as_paper`, then `model.fit`.

The paper's MNIST protocol trains MAF (5), MADE, MADE MoG and Real NVP (5) with one hidden
layer of 1,024 units (appendix C), batch 100, for hundreds of epochs of 500 steps: the
time of an epoch decides whether the MNIST table (`tfp-maf reproduce --dataset mnist`)
is practical. Each model trains ``--steps`` steps on the real MNIST after a
warm-up that compiles, from the library's own shuffled pipeline, and the epoch time is
500 steps at the measured rate (the validation pass and the batch-norm statistics pass,
a few seconds an epoch, are not included). Also recorded: the machine's float32 matmul
rate in the same run, and the share of it each model's dense multiply-adds reach.

    python benchmarks/mnist_epochs.py --kernels both   # blocks against dense
    python benchmarks/mnist_epochs.py --models maf5 --steps 50 --jit off

MNIST is read from ``--data-dir``, else ``$TFP_MAF_DATA``, else ``~/.tfp_maf/data``
(`keras_models.data`). Writes benchmarks/results/mnist_epochs/<machine kind>.json and .md
(`_common.report`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from _common import (  # noqa: E402
    header,
    host_cpu_times,
    matmul_gflops,
    report,
    run_info,
    steal_share,
    whole_executions,
)

from keras_models import data, presets, training, zoo  # noqa: E402
from tfp_maf import MaskedDense  # noqa: E402
from tfp_maf.layers import sublayers

MODELS = ("maf5", "made", "made-mog", "realnvp5")
STEPS_PER_EPOCH = 500  # 50,000 training images, batches of 100


def epoch_time(splits, name: str, steps: int, jit: bool, blocks="auto") -> dict:
    kwargs = presets.model_kwargs("mnist", model=name)
    if "kernel_blocks" in zoo.model_keywords(name):  # the models on MADEs
        kwargs["kernel_blocks"] = blocks
    model = zoo.build(name, splits.event_size, **kwargs)
    training.compile_as_paper(model, name, jit_compile=jit)
    per_call = int(model.steps_per_execution)
    steps = whole_executions(steps, per_call)
    train = splits.pipelines(100, seed=0).train
    model.fit(train, epochs=1, steps_per_epoch=2 * per_call, verbose=0)  # compile
    before, start = host_cpu_times(), time.perf_counter()
    model.fit(train, epochs=1, steps_per_epoch=steps, verbose=0)
    seconds = time.perf_counter() - start
    steal = steal_share(before, host_cpu_times())
    # Multiply-adds per example of the dense kernels (the masks' zeros included, blocks or not).
    masked = [layer for layer in sublayers(model) if isinstance(layer, MaskedDense)]
    in_blocks = {id(b) for layer in masked if layer.layout is not None for b in layer.kernel_blocks}
    macs = sum(int(np.prod(v.shape)) for v in model.trainable_variables if len(v.shape) == 2 and id(v) not in in_blocks)
    macs += sum(layer.mask.size for layer in masked if layer.layout is not None)
    return {
        "model": name, "jit_compile": jit, "kernel_blocks": blocks, "steps": steps, "seconds": round(seconds, 2),
        "ms_per_step": round(1e3 * seconds / steps, 1),
        "seconds_per_epoch": round(STEPS_PER_EPOCH * seconds / steps, 1),
        "parameters": int(model.count_params()),
        "dense_gflops": round(3 * 2 * macs * 100 * steps / seconds / 1e9, 1),
        "host_steal": None if steal is None else round(steal, 3),
    }


def markdown(result: dict) -> str:
    lines = [
        header(result, "Seconds per MNIST epoch (batch 100, 500 steps, `model.fit` after `compile_as_paper`; "
               "`benchmarks/mnist_epochs.py`)"),
        "| model | XLA | kernels | ms per step | s per epoch | parameters | dense GFLOP/s (share of matmul) "
        "| host steal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        share = row["dense_gflops"] / result["matmul_gflops"]
        steal = "-" if row["host_steal"] is None else f"{100 * row['host_steal']:.0f}%"
        kernels = "dense" if row.get("kernel_blocks", 1) == 1 else "blocks"
        lines.append(f"| {row['model']} | {'on' if row['jit_compile'] else 'off'} | {kernels} | {row['ms_per_step']} | "
                     f"{row['seconds_per_epoch']} | {row['parameters']:,} | {row['dense_gflops']} ({share:.0%}) | "
                     f"{steal} |")
    lines += ["", "Dense GFLOP/s counts the multiply-adds of the dense matrices (the masks' zeros included),",
              "3 passes a step (forward, and backward for inputs and weights). Kernels: the MADEs' storage,",
              "dense or in degree blocks (`kernel_blocks`, the default 'auto'); Real NVP has no MADE.", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="default: $TFP_MAF_DATA, else ~/.tfp_maf/data")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--steps", type=int, default=100, help="timed steps per model (after compiling)")
    parser.add_argument("--jit", choices=("on", "off", "both"), default="on",
                        help="compile_as_paper's XLA setting (on: its default)")
    parser.add_argument("--kernels", choices=("blocks", "dense", "both"), default="blocks",
                        help="the MADEs' kernel storage (blocks: kernel_blocks='auto', the default)")
    parser.add_argument("--out", default=None, help="the .json to write (default: see above)")
    args = parser.parse_args(argv)

    splits = data.load("mnist", args.data_dir)
    result = {**run_info(__file__, argv, matmul_gflops()), "rows": []}
    for name in args.models:
        kernels = {"blocks": ["auto"], "dense": [1], "both": ["auto", 1]}[args.kernels]
        if name == "realnvp5":
            kernels = kernels[:1]  # no MADE: the storage changes nothing
        for jit in {"on": [True], "off": [False], "both": [True, False]}[args.jit]:
            for blocks in kernels:
                row = epoch_time(splits, name, args.steps, jit, blocks)
                result["rows"].append(row)
                print(f"{name} (XLA {'on' if jit else 'off'}, kernel_blocks {blocks}): {row['ms_per_step']} ms "
                      f"a step, {row['seconds_per_epoch']} s an epoch", flush=True)
    return report("mnist_epochs", result, markdown, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
