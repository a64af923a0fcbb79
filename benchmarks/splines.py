"""Neural spline flows beside zuko's: densities, the time to draw samples, the spline maths.

1. Density. NSF (5) (`keras_models.NSF`: 8 bins on [-5, 5], a batch norm after each
   layer) beside zuko's NSF of the same size (5 transforms, 8 bins, bound 5, no batch
   norm) and our MAF (5), on the Figure 1 density (10,000 training rows, MADEs of
   2 x 100) and on the small-data case of ``small_data.py`` (digits, D 64, 2 x 128). Adam
   at 1e-3, batches of 100, early stopping on the validation loss (patience
   ``--patience``), the best weights restored; ours by `keras_models.training.fit_as_paper`
   (``model.fit``), zuko's eagerly (its fastest for runs this short), on the data as they
   come and standardised (zuko's splines act on [-5, 5] and it has no batch norm; its
   log-likelihood is mapped back to the data's units). Each run is a process
   of its own. Reported: the test log-likelihood +- 2 standard errors, the epochs and the
   wall time; for Figure 1 also the exact value, the negative entropy of the density.
2. Sampling. The time to draw ``n`` exact samples, warm (ours compiled on a first
   draw, whose time is shown too), each contender in a process of its own: at config A's
   sizes of ``speed.py`` (D 43, 5 layers of 2 x 512, 1,000 samples), and at D 784 with one
   layer of 1 x 1,024 (100 samples; the MNIST MADE's size). Ours runs one MADE pass per
   layer spread over D steps (`tfp_maf.sampling`), zuko's D passes per layer.
3. The spline maths: `tfp_maf.splines.rational_quadratic_spline` against TFP's
   `tfb.RationalQuadraticSpline` (value and log-det, each way) on the same parameters,
   under XLA, 100,000 values of 8 bins.

Run:  python benchmarks/splines.py [--seeds 1] [--patience 20] [--parts density sampling maths]
Needs the ``bench`` extra (zuko) and scikit-learn (for the digits).
Writes benchmarks/results/splines/<machine kind>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import header, report, run_info  # noqa: E402
from small_data import digits, run_ours, run_zuko  # noqa: E402

from keras_models.data.toy import Figure1Density, load_figure1  # noqa: E402

#: name -> (the splits for a seed, the MADEs' hidden units)
DENSITY_CASES = {
    "figure1": (lambda seed: load_figure1(seed=seed), [100, 100]),
    "digits": (digits, [128, 128]),
}


def run_zuko_standardised(splits, seed: int, patience: int, hidden) -> dict:
    """zuko's NSF on the data standardised by the training set's mean and deviation,
    its log-likelihood mapped back to the data's units (minus the sum of log-deviations):
    zuko's splines act on [-5, 5] only and it has no batch norm, so data beyond that
    range pass through its layers as the identity."""
    from keras_models.data.splits import Splits

    mean, std = splits.x_train.mean(0), splits.x_train.std(0) + 1e-6
    scaled = Splits(splits.name, *((a - mean) / std for a in (splits.x_train, splits.x_val, splits.x_test)))
    row = run_zuko(scaled, seed, patience, "NSF", hidden)
    row["test_log_likelihood"] = round(row["test_log_likelihood"] - float(np.log(std).sum()), 2)
    return row


DENSITY_RUNS = {
    "tfp-maf NSF (5)": lambda splits, seed, patience, hidden: run_ours(splits, seed, patience, "auto", "nsf5", hidden),
    "zuko NSF (5)": lambda splits, seed, patience, hidden: run_zuko(splits, seed, patience, "NSF", hidden),
    "zuko NSF (5), standardised data": run_zuko_standardised,
    "tfp-maf MAF (5)": lambda splits, seed, patience, hidden: run_ours(splits, seed, patience, "auto", "maf5", hidden),
}
#: name -> (D, hidden units, layers, samples)
SAMPLING_CASES = {
    "D 43, 5 layers of 2 x 512": (43, [512, 512], 5, 1_000),
    "D 784, 1 layer of 1 x 1024": (784, [1024], 1, 100),
}
SAMPLING_REPEATS = 3


def _sample_ours(D, hidden, layers, n) -> dict:
    import keras_models as km

    model = km.NSF(D, hidden_units=hidden, num_layers=layers)
    start = time.perf_counter()
    model.sample(n, seed=0).numpy()
    first = time.perf_counter() - start
    times = []
    for i in range(SAMPLING_REPEATS):
        start = time.perf_counter()
        model.sample(n, seed=i + 1).numpy()
        times.append(time.perf_counter() - start)
    return {"first_s": round(first, 3), "warm_s": round(float(np.median(times)), 4)}


def _sample_zuko(D, hidden, layers, n) -> dict:
    import torch
    import zuko

    torch.manual_seed(0)
    flow = zuko.flows.NSF(D, transforms=layers, hidden_features=hidden).eval()
    times = []
    with torch.no_grad():
        for _ in range(SAMPLING_REPEATS + 1):
            start = time.perf_counter()
            float(flow().sample((n,))[0, 0])
            times.append(time.perf_counter() - start)
    return {"first_s": round(times[0], 3), "warm_s": round(float(np.median(times[1:])), 4)}


SAMPLING_RUNS = {"tfp-maf NSF": _sample_ours, "zuko NSF": _sample_zuko}


def spline_maths(n: int = 100_000, bins: int = 8, repeats: int = 50) -> dict:
    """Milliseconds per call of ours and TFP's spline, value and log-det, each way, XLA."""
    import tensorflow as tf
    import tensorflow_probability as tfp

    from tfp_maf.splines import num_spline_params, rational_quadratic_spline, spline_parameters

    rng = np.random.default_rng(0)
    raw = tf.constant(rng.normal(size=(n, num_spline_params(bins))), tf.float32)
    z = tf.constant(rng.normal(size=n) * 2, tf.float32)
    bound = 5.0

    def ours(inverse):
        def fn(raw, z):
            return rational_quadratic_spline(z, *spline_parameters(raw, bins, bound), bound, inverse)
        return fn

    def theirs(inverse):
        def fn(raw, z):
            spline = tfp.bijectors.RationalQuadraticSpline(*spline_parameters(raw, bins, bound), range_min=-bound)
            if inverse:
                return spline.inverse(z), spline.inverse_log_det_jacobian(z, event_ndims=0)
            return spline.forward(z), spline.forward_log_det_jacobian(z, event_ndims=0)
        return fn

    out = {}
    for direction, inverse in (("forward", False), ("inverse", True)):
        for name, make in (("tfp-maf", ours), ("TFP RationalQuadraticSpline", theirs)):
            fn = tf.function(make(inverse), jit_compile=True)
            fn(raw, z)[0].numpy()
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                fn(raw, z)[0].numpy()
                times.append(time.perf_counter() - start)
            out.setdefault(direction, {})[name] = round(1e3 * float(np.median(times)), 3)
    return out


def _child(args) -> dict:
    kind, name, key, seed = args.one
    if kind == "density":
        make_splits, hidden = DENSITY_CASES[key]
        return DENSITY_RUNS[name](make_splits(int(seed)), int(seed), args.patience, hidden)
    return SAMPLING_RUNS[name](*SAMPLING_CASES[key])


def _in_a_process(kind, name, key, seed, patience) -> dict:
    child = subprocess.run(
        [sys.executable, __file__, "--one", kind, name, key, str(seed), "--patience", str(patience)],
        capture_output=True, text=True, check=False)
    if child.returncode:
        sys.exit(f"{kind} {name} {key} seed {seed} failed:\n{child.stderr[-3000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def markdown(result: dict) -> str:
    lines = [header(result, "Neural spline flows: tfp-maf beside zuko")]
    if "density" in result:
        lines += ["", "### Test log-likelihood (nats per example, +- 2 s.e.)", "",
                  f"Figure 1's exact value (the density's negative entropy): {result['figure1_exact']:.3f}.", "",
                  "| data | seed | contender | test log-likelihood | epochs | whole run (s) |",
                  "|---|---|---|---|---|---|"]
        for key, seeds in result["density"].items():
            for seed, rows in seeds.items():
                for name, r in rows.items():
                    ll = f"{r['test_log_likelihood']:.3f} +- {r['two_se']:.3f}"
                    lines.append(f"| {key} | {seed} | {name} | {ll} | {r['epochs']} | {r['wall_s']:.1f} |")
    if "sampling" in result:
        lines += ["", "### Time to draw exact samples (s)", "",
                  "| case | samples | contender | first draw | warm draw (median) | zuko / tfp-maf, warm |",
                  "|---|---|---|---|---|---|"]
        for key, rows in result["sampling"].items():
            n = SAMPLING_CASES[key][3]
            ours = rows.get("tfp-maf NSF", {}).get("warm_s")
            for name, r in rows.items():
                ratio = f"{r['warm_s'] / ours:.0f}x" if ours and name != "tfp-maf NSF" else ""
                lines.append(f"| {key} | {n:,} | {name} | {r['first_s']:.2f} | {r['warm_s']:.4f} | {ratio} |")
    if "maths" in result:
        lines += ["", "### The spline maths under XLA (ms per call, 100,000 values, 8 bins, value and log-det)", "",
                  "| direction | tfp-maf | TFP RationalQuadraticSpline |", "|---|---|---|"]
        for direction, r in result["maths"].items():
            lines.append(f"| {direction} | {r['tfp-maf']:.2f} | {r['TFP RationalQuadraticSpline']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--patience", type=int, default=20)
    parser.add_argument("--parts", nargs="+", default=["density", "sampling", "maths"],
                        choices=["density", "sampling", "maths"])
    parser.add_argument("--out", help="a file to write instead of results/splines/<machine kind>.json")
    parser.add_argument("--one", nargs=4, metavar=("KIND", "NAME", "CASE", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:  # a child process: one run, its row as the last line
        print(json.dumps(_child(args)))
        return
    result = run_info(__file__, argv)
    if "density" in args.parts:
        result["figure1_exact"] = Figure1Density().expected_log_prob
        result["density"] = {}
        for key in DENSITY_CASES:
            for seed in range(args.seeds):
                rows = result["density"].setdefault(key, {})[str(seed)] = {}
                for name in DENSITY_RUNS:
                    rows[name] = _in_a_process("density", name, key, seed, args.patience)
                    print(key, seed, name, rows[name], flush=True)
    if "sampling" in args.parts:
        result["sampling"] = {}
        for key in SAMPLING_CASES:
            rows = result["sampling"][key] = {}
            for name in SAMPLING_RUNS:
                rows[name] = _in_a_process("sampling", name, key, 0, args.patience)
                print(key, name, rows[name], flush=True)
    if "maths" in args.parts:
        result["maths"] = spline_maths()
        print(result["maths"], flush=True)
    report("splines", result, markdown, args.out)


if __name__ == "__main__":
    main()
