"""What `keras_models.kernel_storage` buys: a run resumed from a weights file saved
with the MADEs' kernels in another storage (degree blocks on a CPU, dense on a GPU),
with Adam's state carried over against Keras' default, which skips it whole.

A MAF (5) of 2 x 512 on the file ``miniboone-head/data.npy`` of the data root
(`keras_models.data.data_root`: ``--data-dir``, else ``$TFP_MAF_DATA``; 43 variables) trains
``--epochs`` epochs with its kernels in 4 degree blocks and saves its weights; then three
runs go on for ``--more`` epochs: the same model (no interruption), a model with dense
kernels loading the file through `DensityModel.load_weights` (the state rearranged), and
one loading it through Keras' own ``load_weights`` (Adam restarted). Each figure is the
validation negative log-likelihood after each further epoch, per seed.

    python benchmarks/experiments/optimizer_state_resume.py --data-dir ../shared/data
    python benchmarks/experiments/optimizer_state_resume.py --data-dir ../shared/data --seeds 1 --epochs 5 --more 2

Writes benchmarks/results/optimizer_state_resume/<machine kind>.json and .md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common

import keras  # noqa: E402
import numpy as np  # noqa: E402
from _common import header, report, run_info  # noqa: E402

import keras_models as km  # noqa: E402
from keras_models import training  # noqa: E402
from keras_models.data import data_root  # noqa: E402


def _splits(data_dir, seed: int):
    x = np.load(data_root(data_dir) / "miniboone-head" / "data.npy").astype(np.float32)
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    x = x[np.random.default_rng(seed).permutation(len(x))]
    return x[:1200], x[1200:]


def _model(blocks: int, seed: int):
    model = km.MAF(43, hidden_units=[512, 512], num_layers=5, seed=seed, kernel_blocks=blocks)
    return training.compile_as_paper(model, "maf5", jit_compile=False)


def _curve(model, train, val, epochs: int, seed: int) -> list[float]:
    keras.utils.set_random_seed(seed)
    out = []
    for _ in range(epochs):
        model.fit(train, batch_size=100, epochs=1, verbose=0, shuffle=True)
        out.append(float(model.evaluate(val, batch_size=500, verbose=0)))
    return out


def run(data_dir, seeds: int, epochs: int, more: int) -> dict:
    rows = []
    for seed in range(seeds):
        train, val = _splits(data_dir, seed)
        source = _model(4, seed)
        keras.utils.set_random_seed(seed)
        source.fit(train, batch_size=100, epochs=epochs, verbose=0, shuffle=True)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.weights.h5")
            source.save_weights(path)
            rearranged, restarted = _model(1, seed), _model(1, seed)
            for model in (rearranged, restarted):
                model.optimizer.build(model.trainable_variables)
            rearranged.load_weights(path)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Keras says it skips the optimizer's state
                keras.Model.load_weights(restarted, path)
        rows.append({
            "seed": seed,
            "uninterrupted": _curve(source, train, val, more, seed),
            "rearranged": _curve(rearranged, train, val, more, seed),
            "restarted": _curve(restarted, train, val, more, seed),
        })
    return {**run_info(__file__), "epochs": epochs, "more": more, "rows": rows}


def markdown(result: dict) -> str:
    lines = [header(result, "Resuming across kernel storages: Adam's state kept or restarted"), "",
             f"Validation NLL (nats) after each of {result['more']} further epochs, after "
             f"{result['epochs']} epochs in 4 degree blocks; MAF (5) of 2 x 512, MINIBOONE rows.", "",
             "| seed | run | " + " | ".join(f"+{e + 1}" for e in range(result["more"])) + " |",
             "|---|---|" + "---|" * result["more"]]
    for row in result["rows"]:
        for run_name in ("uninterrupted", "rearranged", "restarted"):
            lines.append(f"| {row['seed']} | {run_name} | " + " | ".join(f"{v:.3f}" for v in row[run_name]) + " |")
    gaps = [max(r - u for r, u in zip(row["restarted"], row["uninterrupted"], strict=True)) for row in result["rows"]]
    kept = [max(abs(r - u) for r, u in zip(row["rearranged"], row["uninterrupted"], strict=True))
            for row in result["rows"]]
    lines += ["", f"Worst excess NLL of the restarted run over the uninterrupted one: {max(gaps):.3f} nats; "
              f"of the rearranged run: {max(kept):.3f} nats."]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="the data root (default: $TFP_MAF_DATA)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=30, help="epochs before the interruption")
    parser.add_argument("--more", type=int, default=5, help="epochs after it")
    args = parser.parse_args(argv)
    report("optimizer_state_resume", run(args.data_dir, args.seeds, args.epochs, args.more), markdown)


if __name__ == "__main__":
    main()
