"""The paper's figures and the u-space diagnostic, as PNG files (matplotlib).

* `save_figure1`: Figure 1 of the paper: the target density; for MADE (order x1, x2)
  and MAF (5) the learned density and the training data mapped to the noise u.
* `u_space_diagnostic`: how far the training data mapped to u is from N(0, I): the KL
  divergence from the Gaussian fitted to u to N(0, I), each marginal's
  Kolmogorov-Smirnov distance from N(0, 1), and marginal histograms. A flow
  that fits well maps the data to N(0, I); MADE on Figure 1 visibly does not.
* `save_class_samples`: samples of a conditional image model, one row per class,
  sorted by log-likelihood (the paper's Figure for MNIST).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from keras_models._optional import require

__all__ = ["gaussian_kl", "marginal_ks", "save_class_samples", "save_figure1", "save_for_model", "u_space_diagnostic"]


def _pyplot():
    matplotlib = require("matplotlib", "keras_models.figures")
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def to_noise(model, x, y=None) -> np.ndarray | None:
    """The data mapped to the flow's noise u (evaluation mode), or ``None`` for a
    model without a flow onto a standard normal."""
    import tensorflow as tf

    import tfp_maf

    dist = model.distribution(None if y is None else y[:1], training=False)
    if not hasattr(dist, "bijector") or isinstance(dist.distribution, tfp_maf.MADEMoG):
        return None
    context = None if y is None else model.context(tf.convert_to_tensor(y, model.compute_dtype))
    kwargs = tfp_maf.flow_kwargs(dist.bijector, conditional_input=context, training=False)
    return dist.bijector.inverse(np.asarray(x, np.float32), **kwargs).numpy()


def gaussian_kl(u: np.ndarray) -> float:
    """KL(N(m, S) || N(0, I)) for the Gaussian N(m, S) fitted to the rows of ``u``:
    0.5 (tr S + m'm - D - log det S). Zero iff the fit is N(0, I).

    >>> round(gaussian_kl(np.random.default_rng(0).normal(size=(100_000, 3))), 3)
    0.0
    """
    u = np.asarray(u, np.float64)
    m, S = u.mean(0), np.atleast_2d(np.cov(u, rowvar=False))
    return float(0.5 * (np.trace(S) + m @ m - u.shape[1] - np.linalg.slogdet(S)[1]))


def marginal_ks(u: np.ndarray) -> np.ndarray:
    """Kolmogorov-Smirnov distance of each column of ``u`` from N(0, 1). The fitted
    Gaussian's KL only sees means and covariances: a MADE matches those and can still
    have skewed or bimodal marginals, which this distance shows."""
    u = np.sort(np.asarray(u, np.float64), axis=0)
    n = len(u)
    import tensorflow as tf

    cdf = 0.5 * (1.0 + tf.math.erf(u / math.sqrt(2.0)).numpy())
    upper = np.arange(1, n + 1)[:, None] / n - cdf
    lower = cdf - np.arange(0, n)[:, None] / n
    return np.maximum(upper.max(0), lower.max(0))


def u_space_diagnostic(model, x, path, y=None, title="", max_dims: int = 6) -> dict | None:
    """Writes marginal histograms of u against N(0, 1) to ``path``; returns the KL of
    the fitted Gaussian and each marginal's Kolmogorov-Smirnov distance."""
    u = to_noise(model, x, y)
    if u is None:
        return None
    plt = _pyplot()
    dims = min(u.shape[1], max_dims)
    fig, axes = plt.subplots(1, dims, figsize=(2.4 * dims, 2.4), squeeze=False)
    grid = np.linspace(-4, 4, 200)
    for i, ax in enumerate(axes[0]):
        ax.hist(np.clip(u[:, i], -4, 4), bins=60, density=True, color="tab:blue", alpha=0.6)
        ax.plot(grid, np.exp(-grid**2 / 2) / np.sqrt(2 * np.pi), color="black", lw=1)
        ax.set_title(f"u{i + 1}", fontsize=9)
        ax.set_yticks([])
    kl, ks = gaussian_kl(u), marginal_ks(u)
    fig.suptitle(f"{title}: data in u space. KL(fitted Gaussian || N(0, I)) = {kl:.3f} nats, "
                 f"largest marginal KS distance {ks.max():.3f}", fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return {"gaussian_kl": kl, "marginal_ks_max": float(ks.max()), "marginal_ks_mean": float(ks.mean()),
            "dimensions_shown": dims}


def _density_grid(log_prob, lim=(-10, 10, -8, 8), n=200):
    x1, x2 = np.meshgrid(np.linspace(lim[0], lim[1], n), np.linspace(lim[2], lim[3], n))
    points = np.stack([x1.ravel(), x2.ravel()], 1).astype(np.float32)
    return x1, x2, np.exp(np.asarray(log_prob(points))).reshape(n, n)


def save_figure1(models: dict, path, n_points: int = 2000) -> None:
    """The paper's Figure 1 from trained Figure 1 models (``{"made": ..., "maf5": ...}``)."""
    from keras_models.data import Figure1Density, load_figure1

    plt = _pyplot()
    target = Figure1Density()
    x = load_figure1(n_train=n_points, n_val=10, n_test=10, seed=0).x_train
    shown = [name for name in ("made", "maf5") if name in models]
    fig, axes = plt.subplots(1, 1 + 2 * len(shown), figsize=(3.2 * (1 + 2 * len(shown)), 3.2))
    axes = np.atleast_1d(axes)
    x1, x2, p = _density_grid(target.log_prob)
    axes[0].contourf(x2, x1, p, levels=30, cmap="viridis")
    axes[0].set_title("(a) target density")
    for k, name in enumerate(shown):
        model = models[name]
        label = "MADE" if name == "made" else "MAF (5)"
        x1, x2, p = _density_grid(lambda pts, m=model: m.log_prob(pts).numpy())
        ax = axes[1 + 2 * k]
        ax.contourf(x2, x1, p, levels=30, cmap="viridis")
        ax.set_title(f"({'bcde'[2 * k]}) {label}: density")
        u = to_noise(model, x)
        ax = axes[2 + 2 * k]
        ax.scatter(u[:, 1], u[:, 0], s=2, alpha=0.4)
        ax.set_xlim(-4, 4)
        ax.set_ylim(-4, 4)
        ax.set_title(f"({'bcde'[2 * k + 1]}) {label}: data in u")
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save_class_samples(model, path, lam: float, num_classes: int = 10, per_class: int = 10,
                       side: int = 28, seed: int = 0) -> None:
    """One row per class of samples from a conditional image model, each row sorted
    by log-likelihood (highest first), mapped from logit space back to pixels."""
    plt = _pyplot()
    rows = []
    for k in range(num_classes):
        y = np.zeros((per_class, num_classes), np.float32)
        y[:, k] = 1.0
        samples = model.sample(per_class, y=y, seed=seed + k).numpy()
        order = np.argsort(-model.log_prob(samples, y).numpy())
        pixels = (1.0 / (1.0 + np.exp(-samples[order])) - lam) / (1 - 2 * lam)
        rows.append(np.clip(pixels, 0, 1).reshape(per_class, side, side))
    grid = np.block([[img for img in row] for row in rows])
    fig = plt.figure(figsize=(per_class * 0.6, num_classes * 0.6))
    plt.imshow(grid, cmap="gray", interpolation="nearest")
    plt.axis("off")
    fig.tight_layout(pad=0)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save_for_model(name, model, splits, directory, conditional: bool = False, max_rows: int = 10_000) -> dict:
    """The figures `tfp-maf reproduce` writes for each kept model: the u-space
    diagnostic, and class samples for a conditional image model."""
    directory = Path(directory)
    stem = f"{splits.name}{'_conditional' if conditional else ''}_{name}"
    y = splits.y_train[:max_rows] if conditional else None
    out = {}
    diag = u_space_diagnostic(model, splits.x_train[:max_rows], directory / f"u_space_{stem}.png", y=y, title=name)
    if diag is not None:
        out["u_space"] = diag
    if conditional and splits.logit_lambda is not None and splits.event_size == 784:
        save_class_samples(model, directory / f"samples_{stem}.png", splits.logit_lambda)
        out["samples"] = f"samples_{stem}.png"
    if out:
        (directory / f"{stem}.json").write_text(json.dumps(out, indent=2) + "\n")
    return out
