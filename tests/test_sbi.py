"""keras_models.sbi: sbibm's tasks, its reference files, C2ST and the calibration checks.

The tests that read sbibm's files run where sbibm is installed (``pip install --no-deps
sbibm==1.1.0``, as the test extra's users do); the rest hold the diagnostics to known
answers: C2ST of one Gaussian against itself and a shifted copy, SBC ranks and coverage
of gaussian_linear's exact posterior and of a too-narrow one.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

import numpy as np
import pytest
from scipy import stats

from keras_models import sbi
from keras_models.sbi import reference, tasks

HAS_SBIBM = pytest.mark.skipif(find_spec("sbibm") is None, reason=f"sbibm's files: {reference.INSTALL}")
LINEAR = tasks.get("gaussian_linear")


@pytest.mark.parametrize("name", tasks.NAMES)
def test_shapes_and_seeding(name):
    task = tasks.get(name)
    assert task.name == name
    theta = task.prior_sample(7, rng=np.random.default_rng(0))
    x = task.simulate(theta, rng=np.random.default_rng(1))
    assert theta.shape == (7, task.theta_dim) and x.shape == (7, task.x_dim), name
    assert np.all(np.isfinite(x)), name
    # The same seed (a Generator or an int) gives the same draws; another seed others.
    np.testing.assert_array_equal(theta, task.prior_sample(7, rng=0))
    np.testing.assert_array_equal(x, task.simulate(theta, rng=1))
    assert not np.allclose(x, task.simulate(theta, rng=2)), name
    assert task.simulate(theta[0], rng=1).shape == (1, task.x_dim), name  # one row: a batch of one
    with pytest.raises(ValueError, match="theta must be"):
        task.simulate(np.zeros((3, task.theta_dim + 1)))


@pytest.mark.parametrize("name", [n for n in tasks.NAMES if tasks.get(n).bounds is not None])
def test_box_priors_sample_inside_their_box_and_fill_it(name):
    task = tasks.get(name)
    low, high = task.bounds
    theta = task.prior_sample(5000, rng=0)
    assert np.all(theta >= low) and np.all(theta <= high), name
    # Uniform: each coordinate's mean is the box's centre, its variance width^2 / 12.
    np.testing.assert_allclose((theta.mean(axis=0) - low) / (high - low), 0.5, atol=0.02)
    np.testing.assert_allclose(theta.var(axis=0), (high - low) ** 2 / 12, rtol=0.1)


def test_the_boxes_and_the_gaussian_prior_are_sbibms():
    assert [tasks.get(n).bounds[1][0] for n in ("two_moons", "slcp", "gaussian_mixture")] == [1.0, 3.0, 10.0]
    assert LINEAR.bounds is None
    theta = LINEAR.prior_sample(20000, rng=0)
    np.testing.assert_allclose(theta.var(axis=0), 0.1, rtol=0.05)  # a variance of 0.1, not 0.01
    noise = LINEAR.simulate(np.zeros((20000, 10)), rng=1)
    np.testing.assert_allclose(noise.var(axis=0), 0.1, rtol=0.05)


def test_gaussian_mixture_draws_one_component_per_x():
    x = tasks.get("gaussian_mixture").simulate(np.zeros((20000, 2)), rng=0)
    narrow = np.max(np.abs(x), axis=1) < 0.5
    # The narrow half (sd 0.1) lies within 0.5; the broad one (sd 1) there with p = 0.383^2.
    assert abs(narrow.mean() - (0.5 + 0.5 * 0.3829**2)) < 0.015
    np.testing.assert_allclose(x[~narrow].std(axis=0), 1.0, rtol=0.1)


def test_slcp_simulates_its_mean_scales_and_correlation():
    theta = np.array([[0.5, -1.0, 1.2, 0.8, 0.7]])
    x = tasks.get("slcp").simulate(np.repeat(theta, 20000, axis=0), rng=0).reshape(-1, 2)
    s1, s2, rho = 1.2**2, 0.8**2, np.tanh(0.7)
    np.testing.assert_allclose(x.mean(axis=0), [0.5, -1.0], atol=0.03)
    np.testing.assert_allclose(np.cov(x.T), [[s1**2, rho * s1 * s2], [rho * s1 * s2, s2**2]], rtol=0.03)


def test_two_moons_is_a_half_circle_shifted_by_the_folded_rotation():
    task = tasks.get("two_moons")
    theta = np.array([[0.3, 0.1], [-0.1, -0.3]])  # mirrored about theta_1 = -theta_2: the same x
    x = task.simulate(np.repeat(theta, 5000, axis=0), rng=0)
    shift = np.array([-abs(0.4) / np.sqrt(2), -0.2 / np.sqrt(2)])
    p = x - shift
    r = np.hypot(p[:, 0] - 0.25, p[:, 1])
    assert abs(r.mean() - 0.1) < 1e-3 and abs(r.std() - 0.01) < 1e-3
    assert np.all(p[:, 0] - 0.25 >= -1e-12)  # angles in [-pi/2, pi/2]: the right half


def test_unknown_task_is_refused_with_the_names():
    with pytest.raises(ValueError, match="two_moons"):
        tasks.get("sir")


def test_gaussian_linear_posterior_against_importance_weights():
    rng = np.random.default_rng(0)
    x_o = LINEAR.simulate(LINEAR.prior_sample(1, rng), rng)[0]
    theta = LINEAR.prior_sample(200_000, rng)
    log_w = -0.5 * np.sum((x_o - theta) ** 2, axis=1) / LINEAR.noise_variance
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    mean, cov = LINEAR.posterior(x_o)
    np.testing.assert_allclose(w @ theta, mean, atol=0.01)
    centred = theta - mean
    np.testing.assert_allclose((centred * w[:, None]).T @ centred, cov, atol=0.006)
    np.testing.assert_allclose(mean, x_o / 2)  # the conjugate formula with both variances 0.1
    assert LINEAR.posterior(np.stack([x_o, x_o]))[0].shape == (2, 10)


def test_missing_sbibm_names_the_install_command(monkeypatch):
    monkeypatch.setattr(reference.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(reference.MissingReferenceFiles, match="pip install --no-deps sbibm==1.1.0"):
        reference.observation("two_moons", 1)
    with pytest.raises(ValueError, match="1 to 10"):
        reference.files_dir("two_moons", 11)


@HAS_SBIBM
@pytest.mark.parametrize("name", tasks.NAMES)
def test_sbibm_files_fit_our_tasks(name):
    task = tasks.get(name)
    x_o, theta_o = reference.observation(task, 1), reference.true_parameters(name, 1)
    samples = reference.posterior_samples(name, 1)
    assert x_o.shape == (task.x_dim,) and theta_o.shape == (task.theta_dim,)
    assert samples.shape == (10000, task.theta_dim)
    if task.bounds is not None:
        assert np.all(samples >= task.bounds[0]) and np.all(samples <= task.bounds[1]), name
    # Our simulator at the reference posterior: the observation is a typical draw.
    x = task.simulate(samples[:1000], rng=0)
    z = (x_o - x.mean(axis=0)) / x.std(axis=0)
    assert np.all(np.abs(z) < 3), (name, z)


@HAS_SBIBM
def test_gaussian_linear_posterior_is_sbibms_reference():
    x_o = reference.observation("gaussian_linear", 1)
    samples = reference.posterior_samples("gaussian_linear", 1)
    mean, cov = LINEAR.posterior(x_o)
    # 10,000 samples: the mean's standard error is sqrt(0.05 / 1e4) = 0.0022.
    np.testing.assert_allclose(samples.mean(axis=0), mean, atol=0.01)
    np.testing.assert_allclose(np.cov(samples.T), cov, atol=0.005)


def test_c2st_of_one_gaussian_is_a_half_and_of_separated_ones_is_one():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 2))
    assert abs(sbi.c2st(x, rng.normal(size=(500, 2))) - 0.5) < 0.07
    assert sbi.c2st(x, rng.normal(size=(500, 2)) + [4.0, 0.0]) > 0.97
    with pytest.raises(ValueError, match="same number of columns|\\[n, dim\\]"):
        sbi.c2st(x, np.zeros((5, 3)))


def test_c2st_without_scikit_learn_names_the_sbi_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.neural_network", None)
    with pytest.raises(ImportError, match=r'needs the sbi extra: pip install "tfp-maf\[sbi\]"'):
        sbi.c2st(np.zeros((4, 1)), np.ones((4, 1)))


def _gaussian_posterior(scale: float = 1.0):
    """gaussian_linear's exact posterior, its covariance times ``scale`` (< 1: too narrow)."""
    _, cov = LINEAR.posterior(np.zeros(10))
    cov = scale * cov

    def sample(x, n, seed):
        return np.random.default_rng(seed).multivariate_normal(LINEAR.posterior(x)[0], cov, size=n)

    def log_prob(theta, x):
        return -0.5 * np.sum((theta - LINEAR.posterior(x)[0]) ** 2, axis=1) / cov[0, 0]

    return sample, log_prob


def _joint(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    theta = LINEAR.prior_sample(n, rng)
    return theta, LINEAR.simulate(theta, rng)


def test_sbc_ranks_of_the_exact_posterior_are_uniform_and_of_a_narrow_one_not():
    theta, x = _joint(200)
    exact, _ = _gaussian_posterior()
    ranks = sbi.sbc_ranks(exact, theta, x, num_posterior_samples=19, seed=1)
    assert ranks.shape == (200, 10) and ranks.min() >= 0 and ranks.max() <= 19
    counts = np.bincount(ranks.ravel(), minlength=20)
    assert stats.chisquare(counts).pvalue > 0.01, counts
    np.testing.assert_array_equal(ranks, sbi.sbc_ranks(exact, theta, x, num_posterior_samples=19, seed=1))
    narrow, _ = _gaussian_posterior(scale=0.25)
    counts = np.bincount(sbi.sbc_ranks(narrow, theta, x, 19, seed=1).ravel(), minlength=20)
    assert stats.chisquare(counts).pvalue < 1e-6, counts
    assert counts[0] + counts[-1] > 3 * counts[1:-1].mean()  # the U of an overconfident q


def test_coverage_of_the_exact_posterior_is_the_diagonal_and_of_a_narrow_one_below():
    theta, x = _joint(300)
    levels, coverage = sbi.expected_coverage(*_gaussian_posterior(), theta, x, num_posterior_samples=100)
    assert levels[0] == 0.0 and levels[-1] == 1.0 and coverage.shape == levels.shape
    assert np.max(np.abs(coverage - levels)) < 0.1, coverage
    _, narrow = sbi.expected_coverage(*_gaussian_posterior(scale=0.25), theta, x, num_posterior_samples=100)
    assert np.all(narrow[1:-1] < levels[1:-1]), narrow
    middle = (levels >= 0.3) & (levels < 1.0)
    assert np.all(narrow[middle] < levels[middle] - 0.2), narrow


def test_a_sampler_of_the_wrong_shape_is_named():
    theta, x = _joint(3)
    with pytest.raises(ValueError, match="returned shape"):
        sbi.sbc_ranks(lambda x, n, seed: np.zeros((n, 2)), theta, x, num_posterior_samples=5)


def test_the_plots_draw_into_given_axes():
    import matplotlib

    matplotlib.use("Agg")  # no display: the test draws, never shows
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2)
    ranks = np.random.default_rng(0).integers(0, 10, size=(100, 2))
    assert sbi.plot_sbc_ranks(ranks, 9, num_bins=5, ax=axes, names=["a", "b"]) == list(axes)
    assert axes[1].get_xlabel() == "rank of b"
    with pytest.raises(ValueError, match="2 axes"):
        sbi.plot_sbc_ranks(ranks, 9, ax=axes[0])
    assert sbi.plot_coverage([0, 0.5, 1], [0, 0.5, 1], num_draws=50, ax=axes[0]) is axes[0]
    plt.close(fig)


def test_the_plots_without_matplotlib_name_the_sbi_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"needs the sbi extra"):
        sbi.plot_coverage([0, 1], [0, 1])


@pytest.mark.parametrize("name", tasks.NAMES)
def test_prior_log_prob_is_the_priors_density(name):
    task = tasks.get(name)
    theta = task.prior_sample(5, rng=0)
    log_prob = task.prior_log_prob(theta)
    assert log_prob.shape == (5,) and np.all(np.isfinite(log_prob)), name
    if task.bounds is None:  # N(0, 0.1 I): a variance of 0.1
        expected = -0.5 * np.sum(theta**2, axis=1) / 0.1 - 0.5 * task.theta_dim * np.log(2 * np.pi * 0.1)
        np.testing.assert_allclose(log_prob, expected)
    else:  # 1 / volume inside the box, 0 outside
        low, high = task.bounds
        np.testing.assert_allclose(log_prob, -np.sum(np.log(high - low)))
        assert task.prior_log_prob(high + 0.1)[0] == -np.inf, name
