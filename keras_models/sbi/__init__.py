"""Groundwork for simulation-based inference: sbibm's tasks, its metric, calibration.

| name | what |
|---|---|
| `tasks` | four of sbibm's tasks in NumPy, its constants (`get`, `NAMES`) |
| `reference` | sbibm's observations and reference posterior samples, from its files |
| `c2st` | the classifier two-sample test, sbibm's protocol (scikit-learn) |
| `sbc_ranks`, `expected_coverage` | SBC ranks, highest-density coverage of any posterior |
| `plot_sbc_ranks`, `plot_coverage` | their plots (matplotlib) |

The tasks are ``two_moons``, ``gaussian_linear``, ``slcp`` and ``gaussian_mixture``; the
reference files come with ``pip install --no-deps sbibm==1.1.0``. The posterior enters
the diagnostics as plain callables, so that any model (a tfp-maf model's ``sample`` and
``log_prob``) is checked the same way.

scikit-learn and matplotlib come with the ``sbi`` extra: ``pip install "tfp-maf[sbi]"``.

Example:

>>> import numpy as np
>>> from keras_models import sbi
>>> task = sbi.get("gaussian_linear")
>>> theta = task.prior_sample(200, rng=0)
>>> x = task.simulate(theta, rng=1)
>>> mean, cov = task.posterior(x)  # exact: SBC ranks are uniform
>>> exact = lambda x_o, n, seed: np.random.default_rng(seed).multivariate_normal(
...     task.posterior(x_o)[0], cov, size=n)
>>> ranks = sbi.sbc_ranks(exact, theta, x, num_posterior_samples=19)
>>> ranks.shape, bool(abs(ranks.mean() - 9.5) < 0.5)
((200, 10), True)
"""

from keras_models.sbi import reference, tasks
from keras_models.sbi.c2st import c2st
from keras_models.sbi.calibration import (
    expected_coverage,
    hpd_credibility,
    plot_coverage,
    plot_sbc_ranks,
    sbc_ranks,
)
from keras_models.sbi.tasks import NAMES, get

__all__ = [
    "NAMES",
    "c2st",
    "expected_coverage",
    "get",
    "hpd_credibility",
    "plot_coverage",
    "plot_sbc_ranks",
    "reference",
    "sbc_ranks",
    "tasks",
]
