"""Is a posterior estimator calibrated? Simulation-based calibration and expected coverage.

Both checks draw ``(theta_i, x_i)`` from the joint, ``theta_i ~ p(theta)`` and
``x_i ~ p(x | theta_i)`` (a task's ``prior_sample`` and ``simulate``), and ask where
``theta_i`` falls among ``L`` samples of the estimator's posterior ``q(theta | x_i)``.
If ``q`` is the true posterior, ``theta_i`` is one more draw from it, so that

- `sbc_ranks` (Talts et al. 2018): the rank of ``theta_i`` in each dimension,
  ``#{l : theta_i^(l) < theta_i}``, is uniform on ``{0, ..., L}``;
- `expected_coverage`: the share of the ``theta_i`` inside the estimator's
  highest-density region of credibility ``c`` is ``c`` for every ``c``.

The estimator enters as plain callables, so that any model fits:
``sample_posterior(x, n, seed) -> [n, theta_dim]`` and ``log_prob(theta, x) -> [n]``
for one observation ``x`` (``[x_dim]``). For a conditional tfp-maf model of theta
given x (``keras_models.MAF(theta_dim, conditional_dims=x_dim)``)::

    sample_posterior = lambda x, n, seed: model.sample(n, y=x[None], seed=seed).numpy()
    log_prob = lambda theta, x: model.log_prob(theta, y=x[None]).numpy()

`plot_sbc_ranks` and `plot_coverage` draw them (matplotlib, in the ``sbi`` extra).

#### References

Talts, Betancourt, Simpson, Vehtari, Gelman. Validating Bayesian inference algorithms
with simulation-based calibration. arXiv:1804.06788, 2018.
Hermans, Delaunoy, Rozet, Wehenkel, Begy, Louppe. A crisis in simulation-based
inference? Beware, your posterior approximations can be unfaithful. TMLR 2022.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from keras_models import _optional

__all__ = ["expected_coverage", "hpd_credibility", "plot_coverage", "plot_sbc_ranks", "sbc_ranks"]

# How far the plots' bands reach: the central 99% of a binomial count, by the normal
# approximation (the plots need no scipy).
_Z_99 = 2.5758


def _pairs(theta, x) -> tuple[np.ndarray, np.ndarray]:
    theta, x = np.asarray(theta, dtype=np.float64), np.asarray(x, dtype=np.float64)
    if theta.ndim != 2 or x.ndim != 2 or len(theta) != len(x):
        raise ValueError(f"theta and x must be [N, theta_dim] and [N, x_dim]; got {theta.shape} and {x.shape}.")
    return theta, x


def _seeds(seed: int, n: int) -> list[int]:
    # Independent int seeds, one per observation, that any sampler takes (TF's too).
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(n) % (2**31 - 1)]


def _posterior(sample_posterior: Callable, x, n: int, seed: int, theta_dim: int) -> np.ndarray:
    samples = np.asarray(sample_posterior(x, n, seed), dtype=np.float64)
    if samples.shape != (n, theta_dim):
        raise ValueError(f"sample_posterior(x, {n}, seed) returned shape {samples.shape}, not ({n}, {theta_dim}).")
    return samples


def sbc_ranks(sample_posterior: Callable, theta, x, num_posterior_samples: int = 100, seed: int = 0) -> np.ndarray:
    """Simulation-based calibration ranks, per draw and dimension.

        rank_ij = #{l = 1..L : theta_ij^(l) < theta_ij},   theta_i^(l) ~ q(theta | x_i)

    Uniform on ``{0, ..., L}`` in every dimension j when q is the true posterior; a
    U-shape says q is too narrow, a hump too wide, a slope biased.

    Args:
      sample_posterior: ``(x, n, seed) -> [n, theta_dim]``, samples of q given one
        observation ``x`` (``[x_dim]``) and an int ``seed``.
      theta: ``[N, theta_dim]``, prior draws.
      x: ``[N, x_dim]``, ``x_i`` simulated from ``theta_i``.
      num_posterior_samples: L.
      seed: seeds the N calls of ``sample_posterior`` (each gets its own int).

    Returns:
      ``[N, theta_dim]`` integer ranks in ``0..L``.

    Example:

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> theta = rng.normal(size=(500, 1))  # prior N(0, 1), "x" = theta: q = delta
    >>> exact = lambda x, n, seed: np.full((n, 1), x[0])  # a point mass at the truth
    >>> prior = lambda x, n, seed: np.random.default_rng(seed).normal(size=(n, 1))
    >>> ranks = sbc_ranks(prior, theta, theta, num_posterior_samples=9)
    >>> ranks.shape, int(ranks.min()), int(ranks.max())
    ((500, 1), 0, 9)
    >>> int(sbc_ranks(exact, theta, theta, num_posterior_samples=9).max())  # ties: rank 0
    0
    """
    theta, x = _pairs(theta, x)
    ranks = np.empty(theta.shape, dtype=np.int64)
    for i, s in enumerate(_seeds(seed, len(theta))):
        samples = _posterior(sample_posterior, x[i], num_posterior_samples, s, theta.shape[1])
        ranks[i] = np.sum(samples < theta[i], axis=0)
    return ranks


def hpd_credibility(
    sample_posterior: Callable, log_prob: Callable, theta, x, num_posterior_samples: int = 100, seed: int = 0
) -> np.ndarray:
    """The credibility of the smallest highest-density region of q that holds theta_i.

        alpha_i = (1/L) #{l : log q(theta_i^(l) | x_i) > log q(theta_i | x_i)}

    theta_i lies inside q's highest-density region of credibility c exactly when
    ``alpha_i <= c`` (up to the Monte Carlo error of L samples); alpha_i is uniform on
    [0, 1] when q is the true posterior.

    Args:
      sample_posterior: ``(x, n, seed) -> [n, theta_dim]``, as for `sbc_ranks`.
      log_prob: ``(theta, x) -> [n]``, log q(theta | x) of ``n`` rows ``theta``
        (``[n, theta_dim]``) given one ``x`` (``[x_dim]``).
      theta: ``[N, theta_dim]``, prior draws.
      x: ``[N, x_dim]``, ``x_i`` simulated from ``theta_i``.
      num_posterior_samples: L.
      seed: seeds the N calls of ``sample_posterior``.

    Returns:
      ``[N]`` floats in [0, 1].
    """
    theta, x = _pairs(theta, x)
    alpha = np.empty(len(theta))
    for i, s in enumerate(_seeds(seed, len(theta))):
        samples = _posterior(sample_posterior, x[i], num_posterior_samples, s, theta.shape[1])
        # One call for the truth and the samples: a model's traced function runs once.
        scores = np.asarray(log_prob(np.concatenate([theta[i : i + 1], samples]), x[i]), dtype=np.float64)
        if scores.shape != (num_posterior_samples + 1,):
            raise ValueError(f"log_prob(theta, x) of {num_posterior_samples + 1} rows returned shape {scores.shape}.")
        alpha[i] = np.mean(scores[1:] > scores[0])
    return alpha


def expected_coverage(
    sample_posterior: Callable,
    log_prob: Callable,
    theta,
    x,
    num_posterior_samples: int = 100,
    seed: int = 0,
    levels=None,
) -> tuple[np.ndarray, np.ndarray]:
    """The expected coverage of q's highest-density regions, against their credibility.

        coverage(c) = (1/N) #{i : alpha_i <= c},   alpha_i from `hpd_credibility`

    On the diagonal, ``coverage(c) = c``, when q is calibrated; below it q is
    overconfident (too narrow: the truth falls outside its regions too often), above it
    conservative.

    Args:
      sample_posterior: ``(x, n, seed) -> [n, theta_dim]``.
      log_prob: ``(theta, x) -> [n]``.
      theta: ``[N, theta_dim]``, prior draws.
      x: ``[N, x_dim]``, simulated from them.
      num_posterior_samples: L.
      seed: seeds the N calls of ``sample_posterior``.
      levels: the credibility levels c; default 0, 0.05, ..., 1.

    Returns:
      ``(levels, coverage)``, two 1-D arrays of the same length.

    Example:

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> theta = rng.normal(size=(400, 1))  # prior N(0, 1) and, with no data, posterior
    >>> sample = lambda x, n, seed: np.random.default_rng(seed).normal(size=(n, 1))
    >>> log_prob = lambda t, x: -0.5 * t[:, 0] ** 2
    >>> levels, coverage = expected_coverage(sample, log_prob, theta, np.zeros((400, 1)))
    >>> bool(np.max(np.abs(coverage - levels)) < 0.1)
    True
    """
    levels = np.linspace(0.0, 1.0, 21) if levels is None else np.asarray(levels, dtype=np.float64)
    alpha = hpd_credibility(sample_posterior, log_prob, theta, x, num_posterior_samples, seed)
    return levels, np.mean(alpha[None, :] <= levels[:, None], axis=1)


def _pyplot():
    return _optional.require("matplotlib.pyplot", "the calibration plots of keras_models.sbi", extra="sbi")


def plot_sbc_ranks(ranks, num_posterior_samples: int, num_bins: int | None = None, ax=None, names=None):
    """Histograms of SBC ranks, one per dimension, over the band of a uniform rank.

    A uniform rank puts ``N * k_b / (L + 1)`` draws into bin b (``k_b`` of the L + 1
    ranks in it); the grey band is the central 99% of that binomial count.

    Args:
      ranks: ``[N, theta_dim]``, from `sbc_ranks`.
      num_posterior_samples: the L they were computed with.
      num_bins: bins per histogram; default ``min(20, L + 1)``.
      ax: one matplotlib ``Axes`` per dimension (a sequence, or one ``Axes`` for a single
        dimension); None makes a figure with a row of them.
      names: the dimensions' labels; default ``theta_1``, ...

    Returns:
      The axes, a list.

    Example:

    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np
    >>> ranks = np.random.default_rng(0).integers(0, 10, size=(200, 2))
    >>> axes = plot_sbc_ranks(ranks, num_posterior_samples=9)
    >>> [a.get_xlabel() for a in axes]
    ['rank of theta_1', 'rank of theta_2']
    """
    ranks = np.asarray(ranks)
    if ranks.ndim != 2:
        raise ValueError(f"ranks must be [N, theta_dim]; got shape {ranks.shape}.")
    plt = _pyplot()
    n, dim = ranks.shape
    num_bins = min(20, num_posterior_samples + 1) if num_bins is None else int(num_bins)
    if ax is None:
        _, ax = plt.subplots(1, dim, figsize=(3 * dim, 2.5), squeeze=False)
        ax = ax[0]
    axes = list(np.atleast_1d(ax))
    if len(axes) != dim:
        raise ValueError(f"{dim} dimensions need {dim} axes; got {len(axes)}.")
    edges = np.linspace(-0.5, num_posterior_samples + 0.5, num_bins + 1)
    # Which of the L + 1 ranks each bin holds: the bins need not hold equally many.
    per_bin = np.histogram(np.arange(num_posterior_samples + 1), bins=edges)[0]
    p = per_bin / (num_posterior_samples + 1)
    mean, half = n * p, _Z_99 * np.sqrt(n * p * (1 - p))
    for j, a in enumerate(axes):
        a.fill_between(edges.repeat(2)[1:-1], (mean - half).repeat(2), (mean + half).repeat(2),
                       color="0.85", label="uniform, 99%")
        a.hist(ranks[:, j], bins=edges, histtype="step", color="C0")
        a.set_xlabel(f"rank of {names[j] if names else f'theta_{j + 1}'}")
    axes[0].set_ylabel("draws")
    return axes


def plot_coverage(levels, coverage, num_draws: int | None = None, ax=None, label: str | None = None):
    """The expected coverage curve against the diagonal of a calibrated posterior.

    With ``num_draws`` (N), a grey band shows the central 99% of a calibrated
    estimator's coverage, ``c +- 2.58 sqrt(c (1 - c) / N)``.

    Args:
      levels: the credibility levels, from `expected_coverage`.
      coverage: the coverage at each level.
      num_draws: N, the number of (theta, x) pairs; None draws no band.
      ax: a matplotlib ``Axes``; None makes a figure.
      label: the curve's legend label.

    Returns:
      The axes.

    Example:

    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> ax = plot_coverage([0.0, 0.5, 1.0], [0.0, 0.4, 1.0], num_draws=100)
    >>> ax.get_xlabel(), ax.get_ylabel()
    ('credibility level', 'expected coverage')
    """
    levels, coverage = np.asarray(levels, dtype=np.float64), np.asarray(coverage, dtype=np.float64)
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(3.5, 3.5))
    if num_draws:
        half = _Z_99 * np.sqrt(levels * (1 - levels) / num_draws)
        ax.fill_between(levels, levels - half, levels + half, color="0.85", label="calibrated, 99%")
    ax.plot([0, 1], [0, 1], color="0.4", linestyle="--", linewidth=1)
    ax.plot(levels, coverage, color="C0", label=label)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("credibility level")
    ax.set_ylabel("expected coverage")
    return ax
