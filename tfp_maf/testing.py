"""Reusable checks every bijector here goes through (after TFP's bijector_test_util).

Each helper raises `AssertionError` naming the bijector under test. They work
eagerly and inside `tf.function`; the callers choose.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfp_maf.layers import apply_masks

__all__ = [
    "assert_ldj_matches_autodiff",
    "assert_pairs_close",
    "assert_round_trip",
    "log_det_pairs",
    "round_trip_pairs",
    "jacobian_log_det",
    "randomize_weights",
]


def randomize_weights(layer, seed: int = 0, scale: float = 0.3) -> None:
    """Sets every weight of a Keras layer to N(0, scale^2) draws.

    Our layers start as the identity (zero output kernels, batch norm at
    zero); checks of log-dets and structure need a non-trivial map. MADE
    kernels are then masked again (`tfp_maf.apply_masks`), as any direct
    write of them must be.
    """
    rng = np.random.RandomState(seed)
    for w in layer.weights:
        if w.trainable:
            w.assign(scale * rng.standard_normal(tuple(w.shape)).astype(w.dtype))
    apply_masks(layer)


def jacobian_log_det(fn, x: tf.Tensor) -> tf.Tensor:
    """``log|det d fn(x) / dx|`` per example, by autodiff. ``x``: ``[N, D]``."""
    # A fresh tensor: a bijector cache hit on x would bypass the tape.
    x = tf.identity(x)
    with tf.GradientTape(persistent=True) as tape:  # persistent: the loop asks it D times
        tape.watch(x)
        y = fn(x)
    # One backward pass per variable in a loop, not vectorised by pfor: vectorising the
    # sampler's while loop cost 14 s a call (a 4-variable spline), the loop 2 s.
    jac = tape.batch_jacobian(y, x, experimental_use_pfor=False)
    return tf.linalg.slogdet(jac)[1]


def round_trip_pairs(bijector, u, x, kwargs=None) -> dict:
    """``{check: (actual, expected)}`` for both round trips; pure TF, so it
    runs eagerly or in `tf.function`.

    `tf.identity` gives each second call a new tensor, so TFP's cache cannot
    answer it: both directions are really computed.
    """
    kwargs = kwargs or {}
    return {
        "inverse(forward(u)) == u": (
            bijector.inverse(tf.identity(bijector.forward(u, **kwargs)), **kwargs),
            u,
        ),
        "forward(inverse(x)) == x": (
            bijector.forward(tf.identity(bijector.inverse(x, **kwargs)), **kwargs),
            x,
        ),
    }


def log_det_pairs(bijector, u, x, kwargs=None) -> dict:
    """``{check: (actual, expected)}``: log-dets against slogdet of autodiff
    Jacobians both ways, and ``fldj(u) == -ildj(forward(u))``. Pure TF."""
    kwargs = kwargs or {}
    fldj = bijector.forward_log_det_jacobian(u, event_ndims=1, **kwargs)
    y = tf.identity(bijector.forward(u, **kwargs))
    return {
        "fldj == autodiff": (fldj, jacobian_log_det(lambda t: bijector.forward(t, **kwargs), u)),
        "ildj == autodiff": (
            bijector.inverse_log_det_jacobian(x, event_ndims=1, **kwargs),
            jacobian_log_det(lambda t: bijector.inverse(t, **kwargs), x),
        ),
        "fldj(u) == -ildj(forward(u))": (
            fldj,
            -bijector.inverse_log_det_jacobian(y, event_ndims=1, **kwargs),
        ),
    }


def assert_pairs_close(pairs: dict, owner: str, rtol=1e-5, atol=1e-5) -> None:
    """Asserts every ``(actual, expected)`` pair is close, naming the check."""
    for check, (actual, expected) in pairs.items():
        np.testing.assert_allclose(
            np.asarray(actual), np.asarray(expected), rtol=rtol, atol=atol,
            err_msg=f"{owner}: {check}",
        )


def assert_round_trip(bijector, u, x, kwargs=None, rtol=1e-5, atol=1e-5) -> None:
    """Eager check: both round trips hold (see `round_trip_pairs`)."""
    assert_pairs_close(round_trip_pairs(bijector, u, x, kwargs), bijector.name, rtol, atol)


def assert_ldj_matches_autodiff(bijector, u, x, kwargs=None, rtol=1e-5, atol=1e-5) -> None:
    """Eager check: log-dets match autodiff (see `log_det_pairs`)."""
    assert_pairs_close(log_det_pairs(bijector, u, x, kwargs), bijector.name, rtol, atol)
