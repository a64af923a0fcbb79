"""A density an affine MAF cannot fit and a neural spline flow can: the docs' figure.

The target is a ring of eight Gaussians (radius 4, standard deviation 0.35, equal
weights): eight separated modes, between which the density all but vanishes. An affine
layer can only shift and scale each conditional, so MAF (5) smears mass into the gaps
between the modes; each spline layer can bend a conditional into several humps. Both
are trained the same way on the same data (10,000 training, 2,000 validation and
10,000 test rows; MADEs of 2 x 64; Adam at 1e-3, batches of 100, early stopping with
patience 20, by `keras_models.training.fit_as_paper`), and their test log-likelihoods
are set beside the exact value, the target's own mean log-density on the test rows.

    python benchmarks/nsf_figure.py

Writes docs/assets/nsf_vs_maf.png and benchmarks/results/nsf_figure/<machine kind>.json
and .md (`_common.report`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/, for _common

import keras  # noqa: E402
import numpy as np  # noqa: E402
from _common import header, mean_and_2se, report, run_info  # noqa: E402

import keras_models as km  # noqa: E402
from keras_models import training  # noqa: E402
from keras_models.data.splits import Splits  # noqa: E402

MODES, RADIUS, SCALE = 8, 4.0, 0.35
HIDDEN, LEARNING_RATE, BATCH, PATIENCE = [64, 64], 1e-3, 100, 20
FIGURE = Path(__file__).resolve().parents[1] / "docs" / "assets" / "nsf_vs_maf.png"


def _centres() -> np.ndarray:
    angles = 2 * np.pi * np.arange(MODES) / MODES
    return RADIUS * np.stack([np.cos(angles), np.sin(angles)], 1)


def ring_sample(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (_centres()[rng.integers(0, MODES, n)] + SCALE * rng.standard_normal((n, 2))).astype(np.float32)


def ring_log_prob(x) -> np.ndarray:
    """The target's exact log-density at ``x`` ``[N, 2]``."""
    d2 = ((np.asarray(x, np.float64)[:, None, :] - _centres()[None]) ** 2).sum(-1)
    log_n = -0.5 * d2 / SCALE**2 - np.log(2 * np.pi * SCALE**2)
    top = log_n.max(1)
    return top + np.log(np.exp(log_n - top[:, None]).mean(1))


def train(name: str, splits: Splits):
    keras.utils.set_random_seed(0)
    model = km.build(name, 2, hidden_units=HIDDEN)
    training.compile_as_paper(model, name, learning_rate=LEARNING_RATE)
    pipelines = splits.pipelines(batch_size=BATCH, seed=0)
    _, info = training.fit_as_paper(model, pipelines.train, pipelines.validation, splits.x_train,
                                    patience=PATIENCE, verbose=0, shuffle_epoch=pipelines.epoch)
    return model, {"epochs": info["epochs"], "test_log_likelihood": mean_and_2se(model.log_prob(splits.x_test))}


def save_figure(models: dict, rows: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n, lim = 300, 6.0
    g1, g2 = np.meshgrid(np.linspace(-lim, lim, n), np.linspace(-lim, lim, n))
    points = np.stack([g1.ravel(), g2.ravel()], 1).astype(np.float32)
    panels = {"target": ring_log_prob(points)}
    panels.update({name: np.asarray(model.log_prob(points)) for name, model in models.items()})
    titles = {"target": f"target (exact: {rows['exact'][0]:.2f})",
              "maf5": f"MAF (5), affine: {rows['maf5']['test_log_likelihood'][0]:.2f}",
              "nsf5": f"NSF (5), splines: {rows['nsf5']['test_log_likelihood'][0]:.2f}"}
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 3.6))
    for ax, (name, log_p) in zip(axes, panels.items(), strict=True):
        ax.contourf(g1, g2, np.exp(log_p).reshape(n, n), levels=40, cmap="viridis")
        ax.set_title(titles[name], fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_aspect("equal")
    fig.suptitle("Densities, and test log-likelihoods in nats", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(result: dict) -> str:
    lines = [header(result, "A ring of eight Gaussians: MAF (5) and NSF (5)"), "",
             "| model | test log-likelihood (+- 2 s.e.) | epochs |", "|---|---|---|",
             f"| exact (the target's own) | {result['exact'][0]:.3f} +- {result['exact'][1]:.3f} | |"]
    for name in ("maf5", "nsf5"):
        r = result[name]
        lines.append(f"| {name} | {r['test_log_likelihood'][0]:.3f} +- {r['test_log_likelihood'][1]:.3f} | "
                     f"{r['epochs']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--figure", default=str(FIGURE), help="where to write the figure")
    args = parser.parse_args(argv)
    splits = Splits("ring", ring_sample(10_000, 0), ring_sample(2_000, 1), ring_sample(10_000, 2))
    result = {**run_info(__file__, argv), "exact": mean_and_2se(ring_log_prob(splits.x_test))}
    models = {}
    for name in ("maf5", "nsf5"):
        models[name], result[name] = train(name, splits)
        print(name, result[name], flush=True)
    save_figure(models, result, Path(args.figure))
    report("nsf_figure", result, markdown)


if __name__ == "__main__":
    main()
