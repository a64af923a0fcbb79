"""The spline maths (`tfp_maf.splines`) against TFP's `RationalQuadraticSpline`, and the
spline layer's own contract beyond the shared bijector checklist (`test_bijectors.py`)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from conftest import TOL

from tfp_maf import MADENetwork, MaskedAutoregressive, MaskedRationalQuadraticSpline
from tfp_maf.sampling import Tuning
from tfp_maf.splines import num_spline_params, rational_quadratic_spline, spline_parameters
from tfp_maf.testing import randomize_weights

tfb = tfp.bijectors
BINS, BOUND = 8, 5.0


def _spline_case(dtype, n=512, seed=0):
    rng = np.random.default_rng(seed)
    raw = tf.constant(rng.normal(size=(n, num_spline_params(BINS))), dtype)
    z = tf.constant(3.0 * rng.normal(size=n), dtype)  # about 10% beyond the bound
    return spline_parameters(raw, BINS, BOUND), z


def test_forward_and_log_slope_match_tfp(dtype, mode):
    (widths, heights, slopes), x = _spline_case(dtype)
    ours = mode(lambda: rational_quadratic_spline(x, widths, heights, slopes, BOUND))
    tfp_spline = tfb.RationalQuadraticSpline(widths, heights, slopes, range_min=-BOUND)
    np.testing.assert_allclose(ours[0], tfp_spline.forward(x), **TOL[dtype])
    np.testing.assert_allclose(ours[1], tfp_spline.forward_log_det_jacobian(x, event_ndims=0), **TOL[dtype])


def test_inverse_undoes_forward_with_the_same_log_slope(dtype, mode):
    (widths, heights, slopes), x = _spline_case(dtype, seed=1)
    y, log_slope = rational_quadratic_spline(x, widths, heights, slopes, BOUND)

    def back():
        return rational_quadratic_spline(y, widths, heights, slopes, BOUND, inverse=True)

    x_back, log_slope_back = mode(back)
    # Moderate parameters (normal draws): no bin is steep enough to lose float32 digits.
    np.testing.assert_allclose(x_back, x, **TOL[dtype])
    np.testing.assert_allclose(log_slope_back, log_slope, **TOL[dtype])


def test_log_slope_is_the_derivative():
    (widths, heights, slopes), x = _spline_case(tf.float64, seed=2)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y, log_slope = rational_quadratic_spline(x, widths, heights, slopes, BOUND)
    np.testing.assert_allclose(np.log(tape.gradient(y, x)), log_slope, rtol=1e-9, atol=1e-9)


def test_zero_outputs_are_the_identity_and_xla_agrees_with_eager():
    widths, heights, slopes = spline_parameters(tf.zeros([7, num_spline_params(BINS)]), BINS, BOUND)
    z = tf.constant([-9.0, -5.0, -4.99, -1.0, 0.0, 2.5, 6.0])
    for inverse in (False, True):
        fn = lambda z, inverse=inverse: rational_quadratic_spline(z, widths, heights, slopes, BOUND, inverse)  # noqa: E731
        eager = fn(z)
        xla = tf.function(fn, jit_compile=True)(z)
        np.testing.assert_allclose(eager[0], z, atol=1e-5)
        np.testing.assert_allclose(eager[1], 0.0, atol=1e-5)
        np.testing.assert_allclose(xla[0], eager[0], atol=1e-6)


def test_gradients_are_finite_beyond_the_bound():
    raw = tf.Variable(tf.random.stateless_normal([4, num_spline_params(BINS)], seed=[1, 1]))
    z = tf.constant([-50.0, -5.0, 5.0, 50.0])
    with tf.GradientTape() as tape:
        value, log_slope = rational_quadratic_spline(z, *spline_parameters(raw, BINS, BOUND), BOUND)
        loss = tf.reduce_sum(value) + tf.reduce_sum(log_slope)
    assert np.all(np.isfinite(tape.gradient(loss, raw)))


def test_wrong_parameter_counts_are_refused():
    with pytest.raises(ValueError, match="takes 23 parameters per variable, got 20"):
        spline_parameters(tf.zeros([3, 20]), BINS, BOUND)
    with pytest.raises(ValueError, match="bins must be >= 1, got 0"):
        num_spline_params(0)
    with pytest.raises(ValueError, match="params=23"):
        MaskedRationalQuadraticSpline(MADENetwork(3, hidden_units=[8]), bins=8)
    with pytest.raises(ValueError, match="params=11"):
        MaskedRationalQuadraticSpline(MADENetwork(3, hidden_units=[8], params=23), bins=4)
    with pytest.raises(ValueError, match="Gaussian head"):
        MaskedAutoregressive(MADENetwork(3, hidden_units=[8], params=23))
    with pytest.raises(ValueError, match="None with num_components"):
        MADENetwork(3, hidden_units=[8], params=23, num_components=2)


def test_a_fresh_layer_is_the_identity():
    layer = MaskedRationalQuadraticSpline(MADENetwork(3, hidden_units=[8], params=23, seed=0))
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_allclose(layer.inverse(x), x, atol=1e-5)
    np.testing.assert_allclose(layer.inverse_log_det_jacobian(x, event_ndims=1), 0.0, atol=1e-5)


@pytest.mark.parametrize("conditional_dims", [None, 2])
def test_sampling_is_the_same_whatever_the_schedule(conditional_dims):
    """Same noise, same samples: step by step or in blocks, in one chunk or many, and
    equal to D full passes (the oracle)."""
    D = 11
    made = MADENetwork(D, hidden_units=[32, 32], params=23, conditional_dims=conditional_dims, seed=3)
    randomize_weights(made, 0, scale=0.2)
    layer = MaskedRationalQuadraticSpline(made)
    u = tf.random.stateless_normal([150, D], seed=[4, 5])
    y = None if conditional_dims is None else tf.random.stateless_normal([150, conditional_dims], seed=[6, 7])
    oracle = layer._plain_forward(u, y)
    for tuning in (Tuning(block_steps=1), Tuning(block_steps=4, chunk_rows=32), Tuning(chunk_rows=64, parts=2)):
        made.sampling_tuning = tuning
        x, log_det = layer._mask_aware_forward(u, y)
        np.testing.assert_allclose(x, oracle[0], atol=2e-5, err_msg=str(tuning))
        np.testing.assert_allclose(log_det, oracle[1], atol=2e-4, err_msg=str(tuning))


@pytest.mark.parametrize("conditional_dims", [None, 2])
def test_log_prob_and_its_gradients_under_xla_equal_eager(conditional_dims):
    """The density direction (what `fit` compiles) gives the same values and gradients
    compiled by XLA as eagerly."""
    made = MADENetwork(5, hidden_units=[16], params=23, conditional_dims=conditional_dims, seed=0)
    randomize_weights(made, 0, scale=0.2)
    layer = MaskedRationalQuadraticSpline(made)
    x = tf.random.stateless_normal([16, 5], seed=[1, 1]) * 3
    kw = {} if conditional_dims is None else {"conditional_input": tf.random.stateless_normal([16, 2], seed=[2, 2])}

    def value_and_gradients():
        with tf.GradientTape() as tape:
            u, ildj = layer.inverse(x, **kw), layer.inverse_log_det_jacobian(x, event_ndims=1, **kw)
            loss = tf.reduce_sum(u**2) - tf.reduce_sum(ildj)
        return u, ildj, tape.gradient(loss, made.trainable_variables)

    eager, xla = value_and_gradients(), tf.function(value_and_gradients, jit_compile=True)()
    for a, b in zip(tf.nest.flatten(xla), tf.nest.flatten(eager), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_parameters_of_unknown_rank():
    # A tf.function relaxed to an unknown rank (a model's log_prob called with [D] and
    # then [N, D]) still knows the bins: they come from `bins`, not the shape.
    raw = np.random.default_rng(0).normal(size=(4, 3, num_spline_params(BINS))).astype(np.float32)
    relaxed = tf.function(lambda r: spline_parameters(r, BINS, BOUND), input_signature=[tf.TensorSpec(None)])
    for got, expected in zip(relaxed(raw), spline_parameters(raw, BINS, BOUND), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
