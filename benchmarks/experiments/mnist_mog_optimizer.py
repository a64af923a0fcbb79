"""MADE MoG on MNIST: which optimisation detail of the published code changes how it trains?

The published code's protocol with log-scale heads (``--protocol published-log-scale``:
the published code's hidden sizes, initialisation and label wiring) leaves MADE MoG
18 nats short of the paper: its validation loss is best at epoch 62 while the
training loss keeps falling. Two details of the published code (github.com/gpapamak/maf)
change how Adam moves the mixture head, and each is tried here on its own:

- ``adam-epsilon``: the published Adam divides by ``sqrt(v + 1e-8)``, a floor of 1e-4
  on the root, where Keras' divides by ``sqrt(v) + 1e-7``. A weight whose gradient is
  far below 1e-4 (a component that is rarely responsible for any pixel) takes a step
  of about ``lr * g / 1e-4`` there and a whole ``lr`` here. Keras' Adam with
  ``epsilon=1e-4`` gives the published step to within a factor sqrt(2), and exactly
  far from the floor once the bias correction has settled.
- ``log-precision``: the published head outputs log-precisions ``r``, the log-scale being
  ``-r / 2``, where ours outputs the log-scale (``scale_parameterization``; the full
  ``--protocol published``). The densities are the same; Adam, which steps each weight by
  about ``lr`` whatever its gradient's size, then moves the log-scales half as fast, and
  the published initialisation's N(0, 1) biases are the log-precisions'.

``log-scale`` is the baseline, ``--protocol published-log-scale``. Each variant trains
from the same seed for ``--epochs`` epochs (batches of 100, the paper's step size 1e-3)
and records every epoch's training and validation loss; a variant already in the
results file is kept, so the script continues where it stopped.

    python benchmarks/experiments/mnist_mog_optimizer.py [--data-dir DIR] [--epochs 12]
        [--variants adam-epsilon log-precision log-scale]

MNIST is read from ``--data-dir``, else ``$TFP_MAF_DATA``, else ``~/.tfp_maf/data``
(`keras_models.data`). Writes benchmarks/results/mnist_mog_optimizer/<machine kind>.json
and .md (`_common.report`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common

import keras  # noqa: E402
from _common import header, machine_kind, report, result_path, run_info  # noqa: E402

from keras_models import experiment, presets, training, zoo  # noqa: E402
from keras_models.optimizers import FusedAdam  # noqa: E402

VARIANTS = ("adam-epsilon", "log-precision", "log-scale")


def model_for(variant: str, event_size: int):
    keras.utils.set_random_seed(0)
    protocol = "published" if variant == "log-precision" else "published-log-scale"
    kwargs = presets.model_kwargs("mnist", protocol=protocol, model="made-mog")
    model = zoo.build("made-mog", event_size, **kwargs, seed=0)
    training.compile_as_paper(model, "made-mog")
    if variant == "adam-epsilon":  # the same compile, Adam's epsilon at the published floor
        model.compile(optimizer=FusedAdam(1e-3, epsilon=1e-4), jit_compile=model.jit_compile,
                      steps_per_execution=model.steps_per_execution)
    return model


def variant_row(splits, variant: str, epochs: int) -> dict:
    model, pipelines, start = model_for(variant, splits.event_size), splits.pipelines(100, seed=0), time.monotonic()
    history, info = training.fit_as_paper(model, pipelines.train, pipelines.validation, splits.x_train,
                                          max_epochs=epochs, patience=30, verbose=0,
                                          shuffle_epoch=pipelines.epoch)
    row = {"variant": variant, "loss": [round(v, 2) for v in history.history["loss"]],
           "val_loss": [round(v, 2) for v in history.history["val_loss"]],
           "best_val_loss": round(info["best_val_loss"], 2), "epochs": info["epochs"],
           **experiment.evaluate(model, splits), "seconds": round(time.monotonic() - start)}
    print(json.dumps(row), flush=True)
    return row


def markdown(result) -> str:
    rows, epochs = result["rows"], result["epochs"]
    shown = [e for e in (1, 3, 6, 9, 12, 15, 20, 30, 50) if e <= epochs]
    lines = [header(result, "MADE MoG on MNIST under the published code's protocol with log-scale heads, and two "
                    "optimisation details of the published code (`benchmarks/experiments/mnist_mog_optimizer.py`)"),
             f"MADE MoG (2 x 1024 relu, 10 components, published initialisation), Adam at 1e-3, "
             f"{epochs} epochs from the same seed. Validation loss (nats) at epochs "
             f"{', '.join(map(str, shown))}; the training-validation gap at the last epoch; the test "
             f"log-likelihood of the best epoch's weights.", "",
             "| variant | validation loss | best | train-validation gap | test log-likelihood |",
             "|---|---|---|---|---|"]
    for r in rows:
        curve = ", ".join(f"{r['val_loss'][e - 1]:.1f}" for e in shown)
        gap = r["val_loss"][-1] - r["loss"][-1]
        lines.append(f"| {r['variant']} | {curve} | {r['best_val_loss']:.1f} | {gap:.1f} | "
                     f"{r['test_log_likelihood']:.1f} +- {r['test_log_likelihood_2se']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="default: $TFP_MAF_DATA, else ~/.tfp_maf/data")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    args = parser.parse_args(argv)
    path = result_path("mnist_mog_optimizer", machine_kind())
    done = {}
    if path.exists():  # continue a run: keep the variants trained for the same number of epochs
        previous = json.loads(path.read_text())
        if previous.get("epochs") == args.epochs:
            done = {r["variant"]: r for r in previous["rows"]}
    splits = experiment.load_splits("mnist", args.data_dir)
    rows = []
    for variant in args.variants:
        rows.append(done.get(variant) or variant_row(splits, variant, args.epochs))
        result = {**run_info(__file__, argv), "epochs": args.epochs, "rows": rows}
        report("mnist_mog_optimizer", result, markdown)  # after each variant: a stopped run keeps its rows
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
