"""MADE on MNIST at the paper's step size: our initialisation against the published code's.

Our MADE starts its output layer at zero (so that a MAF starts as the identity) and its
hidden kernels Glorot-uniform. The authors' published code draws every kernel, the output
layer's included, as ``randn(fan_in, units) / sqrt(fan_in + 1)`` with zero biases
(``ml/models/mades.py`` of github.com/gpapamak/maf). At step size 1e-3 on MNIST our MADE
loses most of its relu units in the first steps (`mnist_dead_units.py`) and ends 120 nats
short of the paper. This script counts the dead units after 20, 100 and 500 steps under
either initialisation and, with ``--epochs``, trains MADE with the published one by the
paper's protocol (early stopping, capped at ``--epochs``) and evaluates it on the test set.

    python benchmarks/experiments/mnist_made_init.py [--data-dir DIR] [--epochs 50]

MNIST is read from ``--data-dir``, else ``$TFP_MAF_DATA``, else ``~/.tfp_maf/data``
(`keras_models.data`). Writes benchmarks/results/mnist_made_init/<machine kind>.json and
.md (`_common.report`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common

import keras  # noqa: E402
import numpy as np  # noqa: E402
from _common import DEAD_UNIT_STEPS, dead_unit_run, header, report, run_info  # noqa: E402

from keras_models import experiment, presets, training, zoo  # noqa: E402

INITS = ("ours", "published")


def published_init(model, seed: int = 0) -> None:
    """Every kernel of the model's MADE drawn as ``randn / sqrt(fan_in + 1)``, biases zero.

    Written as a file would be (a dense kernel and a bias per layer): `MaskedDense` puts
    the kernel into its storage, dense or in degree blocks, and applies its mask."""
    rng = np.random.default_rng(seed)
    for layer in [*model.mades[0].hidden_layers, model.mades[0].output_layer]:
        fan_in, units = layer.mask.shape
        layer.load_own_variables({"0": (rng.normal(size=(fan_in, units)) / np.sqrt(fan_in + 1)).astype(np.float32),
                                  "1": np.zeros(units, np.float32)})


def made(splits, init: str):
    keras.utils.set_random_seed(0)
    model = zoo.build("made", splits.event_size, **presets.model_kwargs("mnist", model="made"), seed=0)
    if init == "published":
        published_init(model)
    return training.compile_as_paper(model, "made")  # Adam at the paper's 1e-3


def dead_rows(splits) -> list:
    """`_common.dead_unit_run` at the paper's step size, under each initialisation."""
    return [{"init": init, **dead_unit_run(splits, "made", 1e-3, published_init if init == "published" else None)}
            for init in INITS]


def trained_row(splits, epochs: int) -> dict:
    model, pipelines, start = made(splits, "published"), splits.pipelines(100, seed=0), time.monotonic()
    _, info = training.fit_as_paper(model, pipelines.train, pipelines.validation, splits.x_train,
                                    max_epochs=epochs, patience=30, verbose=0, shuffle_epoch=pipelines.epoch)
    row = {"init": "published", **info, **experiment.evaluate(model, splits),
           "seconds": round(time.monotonic() - start)}
    print(row, flush=True)
    return row


def markdown(result) -> str:
    rows, trained, epochs = result["rows"], result["trained"], result["epochs"]
    lines = [header(result, "MADE on MNIST under our initialisation and the published code's "
                    "(`benchmarks/experiments/mnist_made_init.py`)"),
             "MADE (1 x 1024 relu) on MNIST, Adam at the paper's step size 1e-3.", "",
             "| initialisation | dead of 1,024 units after " + ", ".join(map(str, DEAD_UNIT_STEPS)) + " steps | "
             "validation log-likelihood after 500 steps |", "|---|---|---|"]
    lines += [f"| {r['init']} | {', '.join(str(r['dead'][str(s)]) for s in DEAD_UNIT_STEPS)} | "
              f"{r['val_log_likelihood_after_500_steps']:.1f} |" for r in rows]
    if trained:
        paper = experiment.paper_value("mnist", "made")
        lines += ["", f"Trained by the paper's protocol, capped at {epochs} epochs, published initialisation: "
                  f"test log-likelihood {trained['test_log_likelihood']:.1f} +- "
                  f"{trained['test_log_likelihood_2se']:.1f} after {trained['epochs']} epochs "
                  f"(early stopping {'reached' if trained['early_stopped'] else 'not reached'}); "
                  f"the paper: {paper[0]} +- {paper[1]}."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="default: $TFP_MAF_DATA, else ~/.tfp_maf/data")
    parser.add_argument("--epochs", type=int, default=0, help="also train to this cap (the table's: 50)")
    args = parser.parse_args(argv)
    splits = experiment.load_splits("mnist", args.data_dir)
    rows = dead_rows(splits)
    trained = trained_row(splits, args.epochs) if args.epochs else None
    result = {**run_info(__file__, argv), "epochs": args.epochs, "rows": rows, "trained": trained}
    return report("mnist_made_init", result, markdown)


if __name__ == "__main__":
    main(sys.argv[1:])
