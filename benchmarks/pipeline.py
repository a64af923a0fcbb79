"""Is the input pipeline ever what limits training? Pipeline vs training throughput.

For the real MNIST and a tabular dataset (the real MINIBOONE slice) in ../shared/data,
prints and saves (``benchmarks/results/pipeline.json``) the examples per second of

- the training pipeline alone (shuffled batches of 100, iterated as ``fit`` does), and
- ``model.fit`` on that pipeline for MAF (5) with the paper's hidden sizes,

and their ratio: the pipeline keeps up when it is well above 1.

    python benchmarks/pipeline.py [--data-dir ../shared/data] [--steps 100]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from _common import run_info, save  # noqa: E402

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
    model.fit(repeated, steps_per_epoch=5, epochs=1, verbose=0)  # trace and warm up

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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data"))
    parser.add_argument("--steps", type=int, default=50, help="training steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(HERE / "results" / "pipeline.json"))
    args = parser.parse_args(argv)

    rows = [
        measure("mnist", data.load_mnist(args.data_dir), args.steps, 100, args.repeats),
        measure("miniboone", data.load_miniboone(args.data_dir, folder="miniboone-head"),
                args.steps, 100, args.repeats),
    ]
    result = {**run_info("pipeline.py", argv), "rows": rows}
    print(f"{'dataset':10} {'D':>4} {'model':22} {'pipeline ex/s':>14} {'training ex/s':>14} {'ratio':>7}")
    for r in rows:
        print(f"{r['dataset']:10} {r['D']:>4} {r['model']:22} {r['pipeline_examples_per_s']:>14,} "
              f"{r['training_examples_per_s']:>14,} {r['pipeline_over_training']:>7}")
    save(args.out, result)
    return result


if __name__ == "__main__":
    main()
