"""Four of sbibm's tasks (Lueckmann et al. 2021) in NumPy: priors and simulators.

Each task is written from sbibm's definition (``sbibm/tasks/<name>/task.py``, version
1.1.0) with the same constants, so that its observations and reference posterior
samples (`keras_models.sbi.reference`) apply to ours. Every task has

- ``name``, ``theta_dim``, ``x_dim``;
- ``prior_sample(n, rng)``: ``[n, theta_dim]`` draws from the prior;
- ``prior_log_prob(theta)``: ``[n]`` log-densities of the prior (``-inf`` outside a box);
- ``simulate(theta, rng)``: one ``x`` per row of ``theta``, ``[n, x_dim]``;
- ``bounds``: ``(low, high)`` arrays of the prior's box, or None for an unbounded prior.

``rng`` is a `numpy.random.Generator` or an int seed (`numpy.random.default_rng` takes
either), so that the same seed gives the same draws.

| name | theta | x | prior | simulator |
|---|---|---|---|---|
| ``two_moons`` | 2 | 2 | U[-1, 1]^2 | a noisy half circle, shifted by a folded rotation of theta |
| ``gaussian_linear`` | 10 | 10 | N(0, 0.1 I) | N(theta, 0.1 I) |
| ``slcp`` | 5 | 8 | U[-3, 3]^5 | 4 draws of a 2-D Gaussian whose mean, scales, correlation are theta |
| ``gaussian_mixture`` | 2 | 2 | U[-10, 10]^2 | 0.5 N(theta, I) + 0.5 N(theta, 0.01 I) |

Example:

>>> from keras_models.sbi import tasks
>>> task = tasks.get("two_moons")
>>> theta = task.prior_sample(3, rng=0)
>>> x = task.simulate(theta, rng=1)
>>> theta.shape, x.shape
((3, 2), (3, 2))

#### References

Lueckmann, Boelts, Greenberg, Goncalves, Macke. Benchmarking simulation-based
inference. AISTATS 2021. https://github.com/sbi-benchmark/sbibm
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["NAMES", "GaussianLinear", "GaussianMixture", "SLCP", "TwoMoons", "get"]


def _rng(rng) -> np.random.Generator:
    # default_rng returns a Generator unchanged and seeds a new one from an int.
    return np.random.default_rng(rng)


def _rows(theta, theta_dim: int) -> np.ndarray:
    """``theta`` as float64 ``[n, theta_dim]``: one row is taken as a batch of one, as
    sbibm's simulators take it."""
    theta = np.asarray(theta, dtype=np.float64)
    if theta.ndim == 1:
        theta = theta.reshape(1, -1)
    if theta.ndim != 2 or theta.shape[1] != theta_dim:
        raise ValueError(f"theta must be [n, {theta_dim}] (or [{theta_dim}]); got shape {theta.shape}.")
    return theta


def _box(theta_dim: int, half_width: float) -> tuple[np.ndarray, np.ndarray]:
    return np.full(theta_dim, -half_width), np.full(theta_dim, half_width)


def _uniform(bounds, n: int, rng) -> np.ndarray:
    low, high = bounds
    return _rng(rng).uniform(low, high, size=(int(n), low.size))


def _uniform_log_prob(bounds, theta) -> np.ndarray:
    """log U(theta; low, high) = -sum_d log(high_d - low_d) inside the box, -inf outside.
    The box is closed, as torch's Uniform.support is for sampling's sake: a draw at
    ``low`` is in it."""
    low, high = bounds
    theta = _rows(theta, low.size)
    inside = np.all((theta >= low) & (theta <= high), axis=1)
    return np.where(inside, -np.sum(np.log(high - low)), -np.inf)


@dataclass(frozen=True)
class TwoMoons:
    """sbibm's ``two_moons``: a bimodal, crescent-shaped posterior in 2-D.

        theta ~ U[-1, 1]^2
        a ~ U(-pi/2, pi/2),  r ~ N(0.1, 0.01^2)
        p = (r cos a + 0.25, r sin a)
        x = p + (-|theta_1 + theta_2| / sqrt 2, (theta_2 - theta_1) / sqrt 2)

    (sbibm rotates theta by -pi/4 and folds the first coordinate by its absolute
    value: two thetas, mirrored about theta_1 = -theta_2, give the same x.)

    Example:

    >>> task = TwoMoons()
    >>> x = task.simulate([[0.0, 0.0]], rng=0)  # theta = 0: x = p, a point of the half circle
    >>> bool(abs(((x[0, 0] - 0.25) ** 2 + x[0, 1] ** 2) ** 0.5 - 0.1) < 0.05)
    True
    """

    name: str = "two_moons"
    theta_dim: int = 2
    x_dim: int = 2
    prior_half_width: float = 1.0
    angle_low: float = -math.pi / 2
    angle_high: float = math.pi / 2
    radius_loc: float = 0.1
    radius_scale: float = 0.01  # a standard deviation: pyro's Normal(loc, scale)
    base_offset: float = 0.25

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return _box(self.theta_dim, self.prior_half_width)

    def prior_sample(self, n: int, rng=None) -> np.ndarray:
        return _uniform(self.bounds, n, rng)

    def prior_log_prob(self, theta) -> np.ndarray:
        return _uniform_log_prob(self.bounds, theta)

    def simulate(self, theta, rng=None) -> np.ndarray:
        theta = _rows(theta, self.theta_dim)
        rng = _rng(rng)
        n = theta.shape[0]
        a = rng.uniform(self.angle_low, self.angle_high, size=n)
        r = rng.normal(self.radius_loc, self.radius_scale, size=n)
        p = np.stack([r * np.cos(a) + self.base_offset, r * np.sin(a)], axis=1)
        # sbibm's rotation by angle -pi/4: z0 = c t0 - s t1, z1 = s t0 + c t1 with
        # c = cos(-pi/4) = 1/sqrt 2, s = sin(-pi/4) = -1/sqrt 2.
        z0 = (theta[:, 0] + theta[:, 1]) / math.sqrt(2.0)
        z1 = (theta[:, 1] - theta[:, 0]) / math.sqrt(2.0)
        return p + np.stack([-np.abs(z0), z1], axis=1)


@dataclass(frozen=True)
class GaussianLinear:
    """sbibm's ``gaussian_linear``: a Gaussian prior and a Gaussian likelihood, in 10-D.

        theta ~ N(0, s_p I),   x | theta ~ N(theta, s_x I),   s_p = s_x = 0.1

    ``s_p`` and ``s_x`` are variances: sbibm's ``prior_scale`` and ``simulator_scale``
    (documented there as standard deviations) are put into the covariance matrix as
    they are (``precision_matrix = inverse(scale * I)``). The posterior is Gaussian:

        Sigma = (1/s_p + 1/s_x)^-1 I,   mu = Sigma x / s_x   (= x / 2, Sigma = 0.05 I)

    Example:

    >>> task = GaussianLinear()
    >>> mean, cov = task.posterior([0.2] * 10)
    >>> float(mean[0]), float(cov[0, 0]), float(cov[0, 1])
    (0.1, 0.05, 0.0)
    """

    name: str = "gaussian_linear"
    theta_dim: int = 10
    x_dim: int = 10
    prior_variance: float = 0.1
    noise_variance: float = 0.1

    @property
    def bounds(self) -> None:
        return None

    def prior_sample(self, n: int, rng=None) -> np.ndarray:
        return _rng(rng).normal(0.0, math.sqrt(self.prior_variance), size=(int(n), self.theta_dim))

    def prior_log_prob(self, theta) -> np.ndarray:
        """log N(theta; 0, s_p I) = -(|theta|^2 / s_p + d log(2 pi s_p)) / 2, per row."""
        theta = _rows(theta, self.theta_dim)
        d, s_p = self.theta_dim, self.prior_variance
        return -0.5 * (np.sum(theta**2, axis=1) / s_p + d * math.log(2.0 * math.pi * s_p))

    def simulate(self, theta, rng=None) -> np.ndarray:
        theta = _rows(theta, self.theta_dim)
        return theta + _rng(rng).normal(0.0, math.sqrt(self.noise_variance), size=theta.shape)

    def posterior(self, x_o) -> tuple[np.ndarray, np.ndarray]:
        """The exact posterior p(theta | x_o) = N(mean, cov), by conjugacy.

            cov = (1/s_p + 1/s_x)^-1 I,   mean = cov x_o / s_x   (prior mean 0)

        Args:
          x_o: the observation, ``[x_dim]``, or ``[n, x_dim]`` for n observations.

        Returns:
          ``(mean, cov)``: ``mean`` of ``x_o``'s shape, ``cov`` ``[theta_dim, theta_dim]``
          (the same for every observation).
        """
        x_o = np.asarray(x_o, dtype=np.float64)
        if x_o.shape[-1:] != (self.x_dim,) or x_o.ndim > 2:
            raise ValueError(f"x_o must be [{self.x_dim}] or [n, {self.x_dim}]; got shape {x_o.shape}.")
        variance = 1.0 / (1.0 / self.prior_variance + 1.0 / self.noise_variance)
        return variance * x_o / self.noise_variance, variance * np.eye(self.theta_dim)


@dataclass(frozen=True)
class SLCP:
    """sbibm's ``slcp`` (simple likelihood, complex posterior; Papamakarios et al. 2019).

        theta ~ U[-3, 3]^5
        m = (theta_1, theta_2),  s_1 = theta_3^2,  s_2 = theta_4^2,  rho = tanh(theta_5)
        S = [[s_1^2 + eps, rho s_1 s_2], [rho s_1 s_2, s_2^2 + eps]],  eps = 1e-6
        x = (x_1, ..., x_4) flattened to 8 numbers,  x_j ~ N(m, S) independently

    The posterior has four symmetric modes: the signs of theta_3 and theta_4 are not
    identified (only their squares enter).

    Example:

    >>> task = SLCP()
    >>> x = task.simulate([[1.0, -1.0, 0.1, 0.1, 0.0]], rng=0)  # scales 0.01: x ~ m
    >>> x.round(1).reshape(4, 2).tolist()
    [[1.0, -1.0], [1.0, -1.0], [1.0, -1.0], [1.0, -1.0]]
    """

    name: str = "slcp"
    theta_dim: int = 5
    x_dim: int = 8
    num_draws: int = 4
    prior_half_width: float = 3.0
    # sbibm adds it to the covariance's diagonal "to ensure PSD".
    eps: float = 1e-6

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return _box(self.theta_dim, self.prior_half_width)

    def prior_sample(self, n: int, rng=None) -> np.ndarray:
        return _uniform(self.bounds, n, rng)

    def prior_log_prob(self, theta) -> np.ndarray:
        return _uniform_log_prob(self.bounds, theta)

    def simulate(self, theta, rng=None) -> np.ndarray:
        theta = _rows(theta, self.theta_dim)
        s1, s2 = theta[:, 2] ** 2, theta[:, 3] ** 2
        rho = np.tanh(theta[:, 4])
        var1, var2, cov12 = s1**2 + self.eps, s2**2 + self.eps, rho * s1 * s2
        # The Cholesky factor [[l11, 0], [l21, l22]] of S, in closed form; l22^2 > 0
        # since |rho| < 1 and eps > 0.
        l11 = np.sqrt(var1)
        l21 = cov12 / l11
        l22 = np.sqrt(var2 - l21**2)
        z = _rng(rng).standard_normal(size=(theta.shape[0], self.num_draws, 2))
        x1 = theta[:, None, 0] + l11[:, None] * z[..., 0]
        x2 = theta[:, None, 1] + l21[:, None] * z[..., 0] + l22[:, None] * z[..., 1]
        # [n, 4, 2] -> [n, 8] row by row: (x_1a, x_1b, x_2a, ...), sbibm's flatten_data.
        return np.stack([x1, x2], axis=-1).reshape(theta.shape[0], self.x_dim)


@dataclass(frozen=True)
class GaussianMixture:
    """sbibm's ``gaussian_mixture``: a broad and a narrow Gaussian with the same mean.

        theta ~ U[-10, 10]^2
        x | theta ~ 0.5 N(theta, 1.0^2 I) + 0.5 N(theta, 0.1^2 I)

    One component is drawn per x (both coordinates share it); 1.0 and 0.1 are standard
    deviations (pyro's ``Normal(loc, scale)``).

    Example:

    >>> task = GaussianMixture()
    >>> x = task.simulate(np.zeros((4000, 2)), rng=0)
    >>> round(float(x.var()), 1)  # 0.5 * 1.0^2 + 0.5 * 0.1^2
    0.5
    """

    name: str = "gaussian_mixture"
    theta_dim: int = 2
    x_dim: int = 2
    prior_half_width: float = 10.0
    scales: tuple[float, float] = (1.0, 0.1)
    weights: tuple[float, float] = (0.5, 0.5)

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return _box(self.theta_dim, self.prior_half_width)

    def prior_sample(self, n: int, rng=None) -> np.ndarray:
        return _uniform(self.bounds, n, rng)

    def prior_log_prob(self, theta) -> np.ndarray:
        return _uniform_log_prob(self.bounds, theta)

    def simulate(self, theta, rng=None) -> np.ndarray:
        theta = _rows(theta, self.theta_dim)
        rng = _rng(rng)
        component = rng.choice(len(self.weights), size=theta.shape[0], p=np.asarray(self.weights))
        scale = np.asarray(self.scales)[component][:, None]
        return theta + scale * rng.standard_normal(size=theta.shape)


_TASKS = {task.name: task for task in (TwoMoons(), GaussianLinear(), SLCP(), GaussianMixture())}

#: The tasks' names, as sbibm spells them.
NAMES = tuple(_TASKS)


def get(name: str):
    """The task called ``name`` (one of `NAMES`), with sbibm's constants.

    Example:

    >>> get("slcp").x_dim
    8
    """
    try:
        return _TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; the tasks are {', '.join(NAMES)}.") from None
