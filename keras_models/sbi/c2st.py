"""The classifier two-sample test (C2ST), as sbibm scores posteriors with it.

A classifier learns to tell samples ``x`` (label 0) from samples ``y`` (label 1); its
cross-validated accuracy is the score:

    c2st(x, y) = mean over k folds of accuracy(classifier fitted on the other folds)

0.5 when the two sets are indistinguishable, 1.0 when they are separable. sbibm's
protocol (``sbibm/metrics/c2st.py``) is kept: both sets are z-scored with the mean and
standard deviation (ddof = 1, torch's default) of ``x``, the first; the classifier is
scikit-learn's `MLPClassifier` with two hidden layers of ``10 * dim`` relu units,
adam, ``max_iter=10000``, ``random_state=seed``; the folds are
``KFold(n_folds, shuffle=True, random_state=seed)``.

scikit-learn is in the ``sbi`` extra: ``pip install "tfp-maf[sbi]"``.

#### References

Lopez-Paz, Oquab. Revisiting classifier two-sample tests. ICLR 2017.
Lueckmann et al. Benchmarking simulation-based inference. AISTATS 2021.
"""

from __future__ import annotations

import numpy as np

from keras_models import _optional

__all__ = ["c2st"]


def c2st(
    x,
    y,
    seed: int = 1,
    n_folds: int = 5,
    scoring: str = "accuracy",
    z_score: bool = True,
    max_iter: int = 10000,
) -> float:
    """The cross-validated accuracy of a classifier telling ``x`` from ``y``.

        z = (s - mean(x)) / std(x)   for s in x and in y   (if z_score)
        c2st = (1/k) sum_i accuracy_i,   k-fold, an MLP (10 dim, 10 dim; relu) per fold

    Args:
      x: ``[n, dim]``, e.g. reference posterior samples (the z-scoring uses its
        statistics).
      y: ``[m, dim]``, e.g. an estimator's posterior samples.
      seed: the folds' shuffle and the classifier's initialisation (sbibm's default 1).
      n_folds: the number of cross-validation folds.
      scoring: a scikit-learn scorer's name; ``"roc_auc"`` gives sbibm's ``c2st_auc``.
      z_score: standardise both sets by ``x``'s mean and standard deviation first.
      max_iter: the classifier's most epochs (sbibm's 10000; adam's tolerance stops it
        far earlier).

    Returns:
      The mean score over the folds, a Python float.

    Raises:
      ValueError: if ``x`` and ``y`` are not 2-D with the same number of columns.
      MissingOptionalDependency: if scikit-learn is not installed.

    Example:

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(200, 2))
    >>> c2st(x, rng.normal(size=(200, 2)) + 5.0)  # far apart: separable
    1.0
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must be [n, dim] and [m, dim]; got shapes {x.shape} and {y.shape}.")
    neural_network = _optional.require("sklearn.neural_network", "keras_models.sbi.c2st", extra="sbi")
    model_selection = _optional.require("sklearn.model_selection", "keras_models.sbi.c2st", extra="sbi")
    if z_score:
        mean, std = x.mean(axis=0), x.std(axis=0, ddof=1)
        x, y = (x - mean) / std, (y - mean) / std
    dim = x.shape[1]
    classifier = neural_network.MLPClassifier(
        activation="relu",
        hidden_layer_sizes=(10 * dim, 10 * dim),
        max_iter=max_iter,
        solver="adam",
        random_state=seed,
    )
    data = np.concatenate([x, y])
    target = np.concatenate([np.zeros(len(x)), np.ones(len(y))])
    folds = model_selection.KFold(n_splits=n_folds, shuffle=True, random_state=seed)
    scores = model_selection.cross_val_score(classifier, data, target, cv=folds, scoring=scoring)
    return float(np.mean(scores))
