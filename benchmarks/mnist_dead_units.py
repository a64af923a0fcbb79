"""Why MADE misses the paper's MNIST row at the paper's step size: its relu units die.

Trains MADE and MADE MoG at the paper's MNIST size (1 x 1024 relu) on the real MNIST in
``../shared/data``, with Adam at the paper's step size (1e-3) and at 1e-4, and counts after
20, 100 and 500 steps (one epoch) the hidden units that are dead: never active on 5,000
training images. The logit-space pixels are large (the background averages about -6.5): an Adam step
moves every weight of a unit by about the step size at once, so at 1e-3 a unit's
pre-activation jumps by units of the input scale and most units end below zero for every
image, where their gradient is zero for good.

    python benchmarks/mnist_dead_units.py [--data-dir ../shared/data]

Writes benchmarks/results/mnist_dead_units.json and .md.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
from _common import RESULTS, run_info, save  # noqa: E402

from keras_models import experiment, presets, zoo  # noqa: E402

STEPS = (20, 100, 500)
RATES = (1e-3, 1e-4)


def dead_units(model, x) -> int:
    made = model.made if hasattr(model, "made") else model.mades[0]
    pre_activation = made.hidden_layers[0](x).numpy()
    return int(((pre_activation > 0).mean(0) == 0).sum())


def run(splits, name, learning_rate, init=None):
    """Dead units after each of ``STEPS`` and the validation log-likelihood after the last.
    ``init(model)``, if given, sets the weights before training (`mnist_made_init.py`)."""
    keras.utils.set_random_seed(0)
    model = zoo.build(name, splits.event_size, **presets.model_kwargs("mnist"), seed=0)
    if init is not None:
        init(model)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), jit_compile=True, steps_per_execution=10)
    pipelines = splits.pipelines(100, seed=0)
    x = splits.x_train[:5000]
    row, done = {"model": name, "learning_rate": learning_rate, "dead": {}}, 0
    for steps in STEPS:
        model.fit(pipelines.train.take(steps - done), epochs=1, verbose=0, shuffle=False)
        done = steps
        row["dead"][steps] = dead_units(model, x)
    row["val_log_likelihood_after_500_steps"] = -float(model.evaluate(pipelines.validation, verbose=0))
    print(row, flush=True)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    splits = experiment.load_splits("mnist", args.data_dir)
    rows = [run(splits, name, rate) for name in ("made", "made-mog") for rate in RATES]
    lines = ["| model | Adam step size | dead of 1,024 units after " + ", ".join(map(str, STEPS)) + " steps | "
             "validation log-likelihood after 500 steps |", "|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['learning_rate']:g}{' (the paper)' if r['learning_rate'] == 1e-3 else ''} | "
              f"{', '.join(str(r['dead'][s]) for s in STEPS)} | {r['val_log_likelihood_after_500_steps']:.1f} |"
              for r in rows]
    text = "# benchmarks/mnist_dead_units.py\n\n" + "\n".join(lines) + "\n"
    print(text)
    save(RESULTS / "mnist_dead_units.json", {**run_info("mnist_dead_units.py", argv), "rows": rows}, text)


if __name__ == "__main__":
    main(sys.argv[1:])
