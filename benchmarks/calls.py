"""Long-lived processes: the cost of each call, and whether memory stays flat.

A notebook, a server or a sweep calls a model many times in one process, with inputs of
whatever size comes. This times, after warm-up, `model.log_prob(x)` on NumPy ``x`` and
`model.sample(n)` for random sizes 1..300, against zuko's MAF of the same size (if zuko is
installed: the ``bench`` extra) and TFP's own MAF called eagerly, all in one run; then the
memory growth over 30 such `sample` calls, and per model built, fitted one epoch, used
and deleted: compiled as Keras compiles by default (no XLA on a CPU), as
`keras_models.training.compile_as_paper` compiles (with XLA, which TensorFlow never frees),
and beside a plain Keras model of the same layer sizes.

Config "small": D 20, MAF (5) of 2 x 64 (a model small enough that per-call overhead is
all that is measured); config A: D 43, MAF (5) of 2 x 512. Ours with batch norm (the
zoo's MAF), the peers without.

    python benchmarks/calls.py [--calls 30]

Writes benchmarks/results/calls/<machine kind>.json and .md (`_common.report`).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import header, report, run_info  # noqa: E402

import keras_models as km  # noqa: E402

tfd, tfb = tfp.distributions, tfp.bijectors
CONFIGS = {"small": (20, [64, 64]), "A": (43, [512, 512])}


def rss_mib() -> float:
    """The process's resident memory now (Linux /proc), in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def per_call_ms(fn, sizes) -> float:
    """Median milliseconds of ``fn(size)`` over ``sizes``, after one warm-up pass."""
    for size in sizes:
        fn(size)
    times = []
    for size in sizes:
        start = time.perf_counter()
        fn(size)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def ours(D, hidden):
    model = km.MAF(D, hidden_units=hidden, num_layers=5, seed=0)
    rng = np.random.default_rng(0)
    inputs = {}

    def log_prob(n):
        x = inputs.setdefault(n, rng.normal(size=(n, D)).astype(np.float32))
        return model.log_prob(x).numpy()

    return model, log_prob, lambda n: model.sample(n).numpy()


def zuko_maf(D, hidden):
    try:
        import torch
        import zuko
    except ImportError:
        return None
    torch.manual_seed(0)
    flow = zuko.flows.MAF(D, transforms=5, hidden_features=hidden)
    rng = np.random.default_rng(0)
    inputs = {}

    def log_prob(n):
        x = inputs.setdefault(n, rng.normal(size=(n, D)).astype(np.float32))
        with torch.no_grad():
            return flow().log_prob(torch.from_numpy(x)).numpy()

    def sample(n):
        with torch.no_grad():
            return flow().sample((n,)).numpy()

    return log_prob, sample


def tfp_maf_peer(D, hidden):
    """TFP's own MAF (`tfb.AutoregressiveNetwork`, a tf_keras layer), called eagerly."""
    bijectors = []
    for i in range(5):
        made = tfb.AutoregressiveNetwork(params=2, hidden_units=hidden, activation="relu", event_shape=[D])
        bijectors.append(tfb.MaskedAutoregressiveFlow(made))
        if i < 4:
            bijectors.append(tfb.Permute(list(reversed(range(D)))))
    flow = tfd.TransformedDistribution(tfd.MultivariateNormalDiag(loc=tf.zeros(D)), tfb.Chain(bijectors))
    rng = np.random.default_rng(0)
    inputs = {}

    def log_prob(n):
        x = inputs.setdefault(n, rng.normal(size=(n, D)).astype(np.float32))
        return flow.log_prob(x).numpy()

    return log_prob, lambda n: flow.sample(n).numpy()


def _slope_per_model(one, models: int) -> float:
    """RSS growth (MiB) per call of ``one``: the least-squares slope of the RSS after
    each of ``models`` calls, after one call that loads what is loaded once (TF's
    kernels, XLA). A slope, because the allocator's jitter (tens of MiB up and down
    from one model to the next) would swamp the difference of two readings."""
    one()
    readings = []
    for _ in range(models):
        one()
        gc.collect()
        readings.append(rss_mib())
    return float(np.polyfit(np.arange(models), readings, 1)[0])


def memory_per_model(D, hidden, models: int, as_paper: bool = False) -> float:
    """RSS growth (MiB) per model built, fitted one epoch, used and deleted; compiled by
    Keras' default (``model.compile(optimizer="adam")``: no XLA on a CPU), or with
    ``as_paper`` by `keras_models.training.compile_as_paper` (XLA, 10 steps a call)."""
    from keras_models import training

    x = np.random.default_rng(1).normal(size=(1000, D)).astype(np.float32)

    def one():
        model = km.MAF(D, hidden_units=hidden, num_layers=5, seed=0)
        if as_paper:
            training.compile_as_paper(model, "maf5")
        else:
            model.compile(optimizer="adam")
        model.fit(x, batch_size=100, epochs=1, verbose=0)
        model.log_prob(x[:10])
        model.sample(10)
        del model
        keras.backend.clear_session()

    return _slope_per_model(one, models)


def keras_memory_per_model(D, hidden, models: int) -> float:
    """The same for a plain Keras 3 MLP of the MAF's layer sizes, fitted by regression:
    what Keras and TF themselves keep per model."""
    x = np.random.default_rng(1).normal(size=(1000, D)).astype(np.float32)

    def one():
        layers = [keras.Input((D,))]
        for _ in range(5):
            layers += [keras.layers.Dense(h, activation="relu") for h in hidden] + [keras.layers.Dense(D)]
        model = keras.Sequential(layers)
        model.compile(optimizer="adam", loss="mse")
        model.fit(x, x, batch_size=100, epochs=1, verbose=0)
        model.predict(x[:10], verbose=0)
        del model
        keras.backend.clear_session()

    return _slope_per_model(one, models)


def run_config(name, calls: int, models: int) -> dict:
    D, hidden = CONFIGS[name]
    sizes = [int(n) for n in np.random.default_rng(2).integers(1, 301, calls)]
    model, log_prob, sample = ours(D, hidden)
    row = {"config": name, "D": D, "hidden_units": hidden,
           "ours_log_prob_ms": per_call_ms(log_prob, sizes), "ours_sample_ms": per_call_ms(sample, sizes)}
    before = rss_mib()
    for n in np.random.default_rng(3).integers(1, 301, calls):  # sizes not seen yet
        sample(int(n))
    row["ours_sample_memory_growth_mib"] = rss_mib() - before
    del model
    peer = zuko_maf(D, hidden)
    if peer is None:
        print("zuko is not installed (pip install -e '.[bench]'): its columns are skipped", flush=True)
    else:
        row["zuko_log_prob_ms"], row["zuko_sample_ms"] = (per_call_ms(f, sizes) for f in peer)
    tfp_log_prob, tfp_sample = tfp_maf_peer(D, hidden)
    row["tfp_eager_log_prob_ms"] = per_call_ms(tfp_log_prob, sizes)
    row["tfp_eager_sample_ms"] = per_call_ms(tfp_sample, sizes[:5] if name == "A" else sizes)
    row["ours_memory_per_model_mib"] = memory_per_model(D, hidden, models)
    row["ours_paper_memory_per_model_mib"] = memory_per_model(D, hidden, models, as_paper=True)
    row["keras_memory_per_model_mib"] = keras_memory_per_model(D, hidden, models)
    print(row, flush=True)
    return row


def markdown(result) -> str:
    lines = [
        header(result, "Calls and memory of a long-lived process (`benchmarks/calls.py`)"),
        "Per call: median ms after warm-up, sizes 1..300.",
        "",
        "| config | call | tfp-maf | zuko | TFP's MAF, eager | tfp-maf / zuko |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        for call in ("log_prob", "sample"):
            z = r.get(f"zuko_{call}_ms")
            ratio = f"{r[f'ours_{call}_ms'] / z:.2f}x" if z else "-"
            lines.append(f"| {r['config']} | `{call}` | {r[f'ours_{call}_ms']:.1f} | "
                         f"{'-' if z is None else f'{z:.1f}'} | {r[f'tfp_eager_{call}_ms']:.1f} | {ratio} |")
    lines += ["", "| config | memory over 30 `sample` calls (MiB) | per model built, fitted, used, deleted "
              "(MiB, slope) | the same, `compile_as_paper` (XLA) | the same for a plain Keras MLP of its sizes |",
              "|---|---|---|---|---|"]
    for r in result["rows"]:
        growth, per_model = r["ours_sample_memory_growth_mib"], r["ours_memory_per_model_mib"]
        texts = ["-" if r.get(k) is None else f"{r[k]:+.1f}"
                 for k in ("ours_paper_memory_per_model_mib", "keras_memory_per_model_mib")]
        lines.append(f"| {r['config']} | {growth:+.1f} | {per_model:+.1f} | {' | '.join(texts)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--models", type=int, default=12)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = parser.parse_args(argv)
    rows = [run_config(name, args.calls, args.models) for name in args.configs]
    result = {**run_info(__file__, argv), "rows": rows}
    return report("calls", result, markdown)


if __name__ == "__main__":
    main()
