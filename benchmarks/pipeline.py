"""Is the input pipeline ever what limits training? Pipeline vs training throughput.

For the real MNIST and a tabular dataset (the real MINIBOONE slice) in ../shared/data,
prints and saves (``benchmarks/results/pipeline.json``) the examples per second of

- the training pipeline alone (shuffled batches of 100, iterated as ``fit`` does), and
- ``model.fit`` on that pipeline for MAF (5) with the paper's hidden sizes,

and their ratio: the pipeline keeps up when it is well above 1. It also times whole
training epochs (config A of ``speed.py``: MAF (5) of 2 x 512 on D = 43, batch 1,000)
with our pipeline as it is (tf.data's autotuner off) and with the autotuner back on,
TensorFlow's default: the autotuner's thread competes with the training step for cores.

    python benchmarks/pipeline.py [--data-dir ../shared/data] [--steps 100]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _common import run_info, save, whole_executions  # noqa: E402

from keras_models import data, presets, training, zoo  # noqa: E402

HERE = Path(__file__).resolve().parent


def _median_rate(fn, examples, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    t = float(np.median(times))
    return examples / t, times


def pipeline_rate(ds, steps, batch_size, repeats):
    it = iter(ds.repeat())
    next(it)  # warm up: builds the shuffle buffer and the map function

    def run():
        for _ in range(steps):
            next(it)

    return _median_rate(run, steps * batch_size, repeats)


def training_rate(model, ds, steps, batch_size, repeats):
    repeated = ds.repeat()
    per_call = model.steps_per_execution
    steps = whole_executions(steps, per_call)  # the rate divides by the steps that really ran
    model.fit(repeated, steps_per_epoch=per_call, epochs=1, verbose=0)  # trace and warm up

    def run():
        model.fit(repeated, steps_per_epoch=steps, epochs=1, verbose=0)

    return _median_rate(run, steps * batch_size, repeats)


def measure(name, splits, steps, batch_size, repeats):
    kwargs = presets.model_kwargs(name)
    model = training.compile_as_paper(zoo.build("maf5", splits.event_size, **kwargs), "maf5")
    train = splits.pipelines(batch_size=batch_size).train
    pipe, pipe_times = pipeline_rate(train, 20 * steps, batch_size, repeats)
    fit, fit_times = training_rate(model, train, steps, batch_size, repeats)
    return {
        "dataset": name, "D": splits.event_size, "train_rows": len(splits.x_train),
        "model": f"maf5 {kwargs['hidden_units']}", "batch_size": batch_size,
        "pipeline_examples_per_s": round(pipe), "training_examples_per_s": round(fit),
        "pipeline_over_training": round(pipe / fit, 1),
        "pipeline_times_s": [round(t, 4) for t in pipe_times],
        "training_times_s": [round(t, 4) for t in fit_times],
    }


class _EpochTimer(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.times.append(time.perf_counter() - self._start)


def autotune_effect(epochs, batch_size=1000, rows=20_000, D=43, hidden=(512, 512)):
    """Median epoch time of ``fit`` with our pipeline, autotuner off and on."""
    x = np.random.default_rng(0).standard_normal((rows, D)).astype(np.float32)
    on = tf.data.Options()
    on.autotune.enabled = True
    out = {"D": D, "hidden": list(hidden), "batch_size": batch_size, "rows": rows, "epochs": epochs}
    for label in ("autotune_off", "autotune_on"):
        ds = data.array_dataset(x, batch_size=batch_size, shuffle=True, seed=0)
        if label == "autotune_on":
            ds = ds.with_options(on)
        model = training.compile_as_paper(zoo.build("maf5", D, hidden_units=list(hidden)), "maf5")
        timer = _EpochTimer()
        model.fit(ds, epochs=epochs + 1, verbose=0, callbacks=[timer])
        times = timer.times[1:]  # the first epoch traces and compiles
        out[label] = {"examples_per_s": round(rows / float(np.median(times))),
                      "epoch_times_s": [round(t, 3) for t in times]}
    out["off_over_on"] = round(out["autotune_off"]["examples_per_s"] / out["autotune_on"]["examples_per_s"], 2)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data"))
    parser.add_argument("--steps", type=int, default=50, help="training steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--autotune-epochs", type=int, default=8)
    parser.add_argument("--out", default=str(HERE / "results" / "pipeline.json"))
    args = parser.parse_args(argv)

    rows = [
        measure("mnist", data.load_mnist(args.data_dir), args.steps, 100, args.repeats),
        measure("miniboone", data.load_miniboone(args.data_dir, folder="miniboone-head"),
                args.steps, 100, args.repeats),
    ]
    autotune = autotune_effect(args.autotune_epochs)
    result = {**run_info("pipeline.py", argv), "rows": rows, "autotune": autotune}
    print(f"{'dataset':10} {'D':>4} {'model':22} {'pipeline ex/s':>14} {'training ex/s':>14} {'ratio':>7}")
    for r in rows:
        print(f"{r['dataset']:10} {r['D']:>4} {r['model']:22} {r['pipeline_examples_per_s']:>14,} "
              f"{r['training_examples_per_s']:>14,} {r['pipeline_over_training']:>7}")
    print(f"training epochs, D = {autotune['D']}, batch {autotune['batch_size']}: autotuner off "
          f"{autotune['autotune_off']['examples_per_s']:,} ex/s, on {autotune['autotune_on']['examples_per_s']:,} "
          f"ex/s ({autotune['off_over_on']}x)")
    save(args.out, result)
    return result


if __name__ == "__main__":
    main()
