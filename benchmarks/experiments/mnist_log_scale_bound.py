"""MNIST MAF (5): does a soft bound on the log-scales (``log_scale_bound``) change training?

The zoo keeps the paper's unbounded log-scales; zuko bounds them. Without batch norm at
step size 1e-3, a small flow's validation loss can go inf or NaN once it overfits: the
log-scales grow until some validation row gets (almost) zero density. This script
trains MNIST MAF (5) at the paper's size (one hidden layer of 1,024 relu units) for
``--epochs`` epochs at the step size a user would try first, 1e-3 (the paper's is 1e-4),
with and without the zoo's batch norms, each with the paper's unbounded log-scales and
with ``log_scale_bound=5``, and reports every epoch's validation loss, how many were
not finite, whether a training loss stopped the run, and the largest log-scale the
MADEs gave on the validation set at the end.

    python benchmarks/experiments/mnist_log_scale_bound.py [--data-dir DIR] [--epochs 5]

MNIST is read from ``--data-dir``, else ``$TFP_MAF_DATA``, else ``~/.tfp_maf/data``
(`keras_models.data`). Writes benchmarks/results/mnist_log_scale_bound/<machine kind>.json
and .md (`_common.report`).
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
import tensorflow as tf  # noqa: E402
from _common import header, report, run_info  # noqa: E402

from keras_models import experiment, presets, training, zoo  # noqa: E402
from tfp_maf import MaskedAutoregressive  # noqa: E402
from tfp_maf.layers import kernels_as_stored  # noqa: E402

BOUNDS = (None, 5.0)
LEARNING_RATE = 1e-3


def largest_log_scale(model, x) -> float:
    """The largest |log-scale| any MAF layer uses on ``x`` (each seeing what reaches it in
    evaluation mode), after the bound where there is one."""
    largest, rows = 0.0, x
    with kernels_as_stored():
        for bijector in model.distribution().bijector.bijectors:
            if isinstance(bijector, MaskedAutoregressive):
                # What the layer's inverse uses: its log-det is minus their sum.
                _, log_scale = bijector._parameters_at(tf.constant(rows), None)
                largest = max(largest, float(np.max(np.abs(log_scale))))
            rows = bijector.inverse(rows).numpy()
    return largest


def run(splits, batch_norm: bool, bound, epochs: int) -> dict:
    keras.utils.set_random_seed(0)
    kwargs = presets.model_kwargs("mnist")
    model = zoo.build("maf5", splits.event_size, **kwargs, seed=0, batch_norm=batch_norm, log_scale_bound=bound)
    training.compile_as_paper(model, "maf5", learning_rate=LEARNING_RATE)
    pipelines, start = splits.pipelines(100, seed=0), time.monotonic()
    history, info = training.fit_as_paper(model, pipelines.train, pipelines.validation, splits.x_train,
                                          max_epochs=epochs, patience=epochs, verbose=0,
                                          shuffle_epoch=pipelines.epoch)
    val = [float(v) for v in (history.history.get("val_loss", []) if history else [])]
    row = {"batch_norm": batch_norm, "log_scale_bound": bound, "val_loss": val,
           "non_finite_val_epochs": info["non_finite_val_epochs"],
           "stopped_on_non_finite": info["stopped_on_non_finite"],
           "best_val_loss": info["best_val_loss"],
           "largest_log_scale": round(largest_log_scale(model, splits.x_val[:2000]), 2),
           "seconds": round(time.monotonic() - start)}
    print(row, flush=True)
    return row


def markdown(result) -> str:
    lines = [header(result, "MNIST MAF (5) with and without a bound on the log-scales "
                    "(`benchmarks/experiments/mnist_log_scale_bound.py`)"),
             f"MAF (5), one hidden layer of 1,024 relu units, Adam at {LEARNING_RATE:g}, batches of 100, "
             f"{result['epochs']} epochs.", "",
             "| batch norm | log-scale bound | validation loss per epoch | non-finite epochs | "
             "stopped by a non-finite training loss | largest abs log-scale at the end |",
             "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        losses = ", ".join(f"{v:.1f}" for v in r["val_loss"]) or "-"
        lines.append(f"| {'yes' if r['batch_norm'] else 'no'} | {r['log_scale_bound'] or 'none (the paper)'} | "
                     f"{losses} | {r['non_finite_val_epochs']} | {'yes' if r['stopped_on_non_finite'] else 'no'} | "
                     f"{r['largest_log_scale']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="default: $TFP_MAF_DATA, else ~/.tfp_maf/data")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args(argv)
    splits = experiment.load_splits("mnist", args.data_dir)
    rows = [run(splits, batch_norm, bound, args.epochs) for batch_norm in (True, False) for bound in BOUNDS]
    result = {**run_info(__file__, argv), "epochs": args.epochs, "rows": rows}
    return report("mnist_log_scale_bound", result, markdown)


if __name__ == "__main__":
    main(sys.argv[1:])
