"""Is the input pipeline ever what limits training? Pipeline vs training throughput.

For the real MNIST and MINIBOONE, prints and saves the examples per second of

- the training pipeline alone (shuffled batches of 100, iterated as ``fit`` does), and
- ``model.fit`` on that pipeline for MAF (5) with the paper's hidden sizes,

and their ratio: the pipeline keeps up when it is well above 1. It also times whole
training epochs (config A of ``speed.py``: MAF (5) of 2 x 512 on D = 43, batch 1,000)
with our pipeline as it is (tf.data's autotuner off) and with the autotuner back on,
TensorFlow's default: the autotuner's thread competes with the training step for cores.

    python benchmarks/pipeline.py [--data-dir DIR] [--steps 50]

The datasets are read from ``--data-dir``, else ``$TFP_MAF_DATA``, else
``~/.tfp_maf/data`` (`keras_models.data`); ``--miniboone-folder`` names another folder
of the same layout (a slice of MINIBOONE, say). Writes
benchmarks/results/pipeline/<machine kind>.json and .md (`_common.report`).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _common import EpochTimes, header, report, run_info, whole_executions  # noqa: E402

from keras_models import data, presets, training, zoo  # noqa: E402


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
    kwargs = presets.model_kwargs(name, model="maf5")
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
        timer = EpochTimes()
        model.fit(ds, epochs=epochs + 1, verbose=0, callbacks=[timer])
        times = timer.seconds[1:]  # the first epoch traces and compiles
        out[label] = {"examples_per_s": round(rows / float(np.median(times))),
                      "epoch_times_s": [round(t, 3) for t in times]}
    out["off_over_on"] = round(out["autotune_off"]["examples_per_s"] / out["autotune_on"]["examples_per_s"], 2)
    return out


def markdown(result) -> str:
    a = result["autotune"]
    lines = [header(result, "The input pipeline against training (`benchmarks/pipeline.py`)"),
             "| dataset | model | pipeline (examples/s) | training (examples/s) | ratio |", "|---|---|---|---|---|"]
    lines += [f"| {r['dataset']} (D {r['D']}, {r['train_rows']:,} training rows) | {r['model']} "
              f"| {r['pipeline_examples_per_s']:,} | {r['training_examples_per_s']:,} "
              f"| {r['pipeline_over_training']}x |" for r in result["rows"]]
    lines += ["", f"Training epochs of MAF (5) of {' x '.join(map(str, a['hidden']))} on D = {a['D']}, batch "
              f"{a['batch_size']:,}, {a['rows']:,} rows, median of {a['epochs']} epochs: tf.data's autotuner off "
              f"(the library's pipeline) {a['autotune_off']['examples_per_s']:,} examples/s, on "
              f"{a['autotune_on']['examples_per_s']:,} ({a['off_over_on']}x)."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="default: $TFP_MAF_DATA, else ~/.tfp_maf/data")
    parser.add_argument("--miniboone-folder", default="miniboone")
    parser.add_argument("--steps", type=int, default=50, help="training steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--autotune-epochs", type=int, default=8)
    parser.add_argument("--out", default=None, help="the .json to write (default: see above)")
    args = parser.parse_args(argv)

    rows = [
        measure("mnist", data.load_mnist(args.data_dir), args.steps, 100, args.repeats),
        measure("miniboone", data.load_miniboone(args.data_dir, folder=args.miniboone_folder),
                args.steps, 100, args.repeats),
    ]
    autotune = autotune_effect(args.autotune_epochs)
    result = {**run_info(__file__, argv), "rows": rows, "autotune": autotune}
    return report("pipeline", result, markdown, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
