"""Time to result on a small dataset: a whole early-stopped run, beside zuko's.

Most density-estimation users have tabular data of a few thousand rows. There a run
lasts seconds to minutes, and what a model costs before its first step (tracing the
train, test and statistics functions, and XLA compiling them) can be most of it.

The case: scikit-learn's 8 x 8 digits (1,797 images, D 64), dequantized with uniform
noise, scaled to [0, 1] and logit-transformed as the paper does for MNIST (lambda
1e-6); 360 test, 240 validation and 1,197 training rows. MAF (5) of 2 x 128 (tfp-maf's
with batch norm, as the zoo builds it; zuko's without, as zuko builds it), Adam at
1e-3, batches of 100, early stopping with patience ``--patience`` on the validation
loss, the best weights restored. Ours runs the path of the docs
(`keras_models.training.compile_as_paper` and `fit_as_paper`, i.e. `model.fit`), as it
decides on XLA by default (``"auto"``: not for a run this short) and with XLA forced;
zuko's runs eagerly (its fastest here: `torch.compile` compiles for longer than such a
run lasts). Each run is a process of its own, as a user's script
or notebook would be (and TensorFlow's and torch's thread pools never share the cores).
Reported per contender and seed: the wall time of the whole run (model built to test
log-likelihood, imports excluded), of its first epoch, the median of the later ones,
the epochs, and the test log-likelihood +- 2 standard errors.

Run:  python benchmarks/small_data.py [--seeds 3] [--patience 30]
Needs the ``bench`` extra and scikit-learn (for the digits).
Writes benchmarks/results/small_data/<machine kind>.json and .md.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import EpochTimes, header, mean_and_2se, report, run_info  # noqa: E402

import keras_models as km  # noqa: E402
from keras_models import training  # noqa: E402
from keras_models.data.splits import Splits  # noqa: E402

D, HIDDEN, LAYERS, BATCH, LEARNING_RATE = 64, [128, 128], 5, 100, 1e-3
TEST, VALIDATION = 360, 240


def digits(seed: int) -> Splits:
    """The digits, dequantized, logit-transformed and split; the noise and the split
    follow ``seed``."""
    from sklearn.datasets import load_digits

    rng = np.random.default_rng(seed)
    x = load_digits().data.astype(np.float64)
    x = (x + rng.uniform(size=x.shape)) / 17.0  # pixel values are 0..16
    lam = 1e-6
    x = lam + (1 - 2 * lam) * x
    x = (np.log(x) - np.log1p(-x)).astype(np.float32)
    x = x[rng.permutation(len(x))]
    return Splits("digits", x[TEST + VALIDATION:], x[TEST:TEST + VALIDATION], x[:TEST])


def run_ours(splits: Splits, seed: int, patience: int, jit_compile, model_name: str = "maf5",
             hidden=HIDDEN) -> dict:
    """A zoo model (``model_name``, the command line's names) by the docs' path."""
    start = time.perf_counter()
    keras.utils.set_random_seed(seed)
    model = km.build(model_name, splits.x_train.shape[1], hidden_units=hidden)
    training.compile_as_paper(model, model_name, learning_rate=LEARNING_RATE, jit_compile=jit_compile)
    pipelines = splits.pipelines(batch_size=BATCH, seed=seed)
    epochs = EpochTimes()
    # The timer is the first callback: fit_as_paper's own (statistics, early stopping)
    # run after it in each epoch's end, so that they count in the epoch.
    _, info = training.fit_as_paper(model, pipelines.train, pipelines.validation, splits.x_train,
                                    patience=patience, callbacks=[epochs], verbose=0,
                                    shuffle_epoch=pipelines.epoch)
    log_likelihood = mean_and_2se(model.log_prob(splits.x_test))
    return _row(time.perf_counter() - start, epochs.seconds, info["epochs"], log_likelihood)


def run_zuko(splits: Splits, seed: int, patience: int, flow_name: str = "MAF", hidden=HIDDEN) -> dict:
    """zuko's ``flow_name`` (``"MAF"``, ``"NSF"``) of ``LAYERS`` transforms, trained eagerly."""
    import torch
    import zuko

    start = time.perf_counter()
    torch.manual_seed(seed)
    flow = getattr(zuko.flows, flow_name)(splits.x_train.shape[1], transforms=LAYERS, hidden_features=hidden)
    optimizer = torch.optim.Adam(flow.parameters(), lr=LEARNING_RATE)
    x_train, x_val, x_test = (torch.from_numpy(a) for a in (splits.x_train, splits.x_val, splits.x_test))
    generator = torch.Generator().manual_seed(seed)
    best, best_state, wait, seconds = np.inf, None, 0, []
    while wait < patience:
        epoch_start = time.perf_counter()
        flow.train()
        for batch in torch.randperm(len(x_train), generator=generator).split(BATCH):
            loss = -flow().log_prob(x_train[batch]).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        flow.eval()
        with torch.no_grad():
            val_loss = float(-flow().log_prob(x_val).mean())
        if val_loss < best:
            best, best_state, wait = val_loss, copy.deepcopy(flow.state_dict()), 0
        else:
            wait += 1
        seconds.append(time.perf_counter() - epoch_start)
    flow.load_state_dict(best_state)
    with torch.no_grad():
        log_likelihood = mean_and_2se(flow().log_prob(x_test).numpy())
    return _row(time.perf_counter() - start, seconds, len(seconds), log_likelihood)


def run_keras_floor(splits: Splits, seed: int, patience: int) -> dict:
    """What Keras and TensorFlow cost before a first step: a plain Keras model of the
    same layers (five blocks of Dense 128, 128 relu and Dense 64 with a residual sum),
    trained by `fit` with the same batches and validation for five epochs, compiled as
    ``compile_as_paper`` decides for a run this short (no XLA, one step per call). Not a
    density model: its loss is a squared error."""
    start = time.perf_counter()
    keras.utils.set_random_seed(seed)
    inputs = h = keras.Input((D,))
    for _ in range(LAYERS):
        a = keras.layers.Dense(HIDDEN[0], activation="relu")(h)
        a = keras.layers.Dense(HIDDEN[1], activation="relu")(a)
        h = keras.layers.Dense(D)(a) + h
    model = keras.Model(inputs, h)
    model.compile(keras.optimizers.Adam(LEARNING_RATE), loss="mse", jit_compile=False, steps_per_execution=1)
    epochs = EpochTimes()
    model.fit(splits.x_train, splits.x_train, batch_size=BATCH, epochs=5, callbacks=[epochs], verbose=0,
              validation_data=(splits.x_val, splits.x_val))
    return _row(time.perf_counter() - start, epochs.seconds, 5, (float("nan"), float("nan")))


def _row(wall, epoch_seconds, epochs, log_likelihood) -> dict:
    return {
        "wall_s": round(wall, 2),
        "first_epoch_s": round(epoch_seconds[0], 2),
        "later_epoch_s": round(float(np.median(epoch_seconds[1:])), 3) if len(epoch_seconds) > 1 else None,
        "epochs": int(epochs),
        "test_log_likelihood": round(log_likelihood[0], 2),
        "two_se": round(log_likelihood[1], 2),
    }


def markdown(result: dict) -> str:
    lines = [header(result, "Time to result on a small dataset (digits, D 64, MAF (5) of 2 x 128)"), "",
             "| contender | seed | whole run (s) | first epoch (s) | later epochs (s, median) | epochs "
             "| test log-likelihood | whole run / zuko's |",
             "|---|---|---|---|---|---|---|---|"]
    for seed, rows in result["seeds"].items():
        zuko = rows.get("zuko", {}).get("wall_s")
        for name, r in rows.items():
            ratio = f"{r['wall_s'] / zuko:.2f}x" if zuko else ""
            ll = (f"{r['test_log_likelihood']:.2f} +- {r['two_se']:.2f}"
                  if np.isfinite(r["test_log_likelihood"]) else "(not a density)")
            lines.append(f"| {name} | {seed} | {r['wall_s']:.1f} | {r['first_epoch_s']:.2f} | "
                         f"{r['later_epoch_s']} | {r['epochs']} | {ll} | {ratio} |")
    return "\n".join(lines) + "\n"


RUNS = {"tfp-maf": lambda s, seed, patience: run_ours(s, seed, patience, "auto"),
        "tfp-maf, XLA forced": lambda s, seed, patience: run_ours(s, seed, patience, True),
        "zuko": lambda s, seed, patience: run_zuko(s, seed, patience),
        "plain Keras MLP, same layers": run_keras_floor}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--patience", type=int, default=30)
    parser.add_argument("--contenders", nargs="+", default=list(RUNS), choices=list(RUNS),
                        help="which to run (default: all)")
    parser.add_argument("--out", help="a file to write instead of results/small_data/<machine kind>.json")
    parser.add_argument("--one", nargs=2, metavar=("CONTENDER", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:  # a child process: one run, its row as the last line
        name, seed = args.one[0], int(args.one[1])
        print(json.dumps(RUNS[name](digits(seed), seed, args.patience)))
        return
    result = {**run_info(__file__, argv), "seeds": {}}
    for seed in range(args.seeds):
        rows = result["seeds"][str(seed)] = {}
        for name in args.contenders:
            child = subprocess.run(
                [sys.executable, __file__, "--one", name, str(seed), "--patience", str(args.patience)],
                capture_output=True, text=True, check=False)
            if child.returncode:
                sys.exit(f"{name}, seed {seed} failed:\n{child.stderr[-3000:]}")
            rows[name] = json.loads(child.stdout.strip().splitlines()[-1])
            print(seed, name, rows[name], flush=True)
    report("small_data", result, markdown, args.out)


if __name__ == "__main__":
    main()
