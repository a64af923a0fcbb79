"""ExpGammaBatchNorm and its Keras layer against hand-computed values (appendix B)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import GRADIENT_PLACES, written_out_gradients

from tfp_maf import BatchNormState, ExpGammaBatchNorm, flow_kwargs

EPS = 1e-5


def _reference_inverse(x, beta, gamma, m, v):
    u = (x - m) / np.sqrt(v + EPS) * np.exp(gamma) + beta
    ildj = np.sum(gamma - 0.5 * np.log(v + EPS)) * np.ones(x.shape[0])
    return u, ildj


@pytest.fixture
def setup():
    rng = np.random.RandomState(0)
    x = rng.normal(loc=3.0, scale=2.0, size=(100, 3))
    params = dict(
        beta=rng.normal(size=3), gamma=rng.normal(size=3),
        mean=rng.normal(size=3), variance=rng.uniform(0.5, 2, size=3),
    )
    return x, params


def test_evaluation_uses_the_stored_statistics(setup, mode):
    x, p = setup
    b = ExpGammaBatchNorm(**p)
    u, ildj = mode(lambda: (b.inverse(x), b.inverse_log_det_jacobian(x, event_ndims=1)))
    ref_u, ref_ildj = _reference_inverse(x, p["beta"], p["gamma"], p["mean"], p["variance"])
    np.testing.assert_allclose(u, ref_u, rtol=1e-10)
    np.testing.assert_allclose(ildj, ref_ildj, rtol=1e-10)
    # forward is the exact inverse, from the same statistics.
    np.testing.assert_allclose(b.forward(tf.constant(ref_u)), x, rtol=1e-10)


def test_training_uses_minibatch_statistics(setup, mode):
    x, p = setup
    b = ExpGammaBatchNorm(**p)
    u, ildj = mode(
        lambda: (b.inverse(x, training=True), b.inverse_log_det_jacobian(x, 1, training=True))
    )
    m, v = x.mean(0), x.var(0)  # biased variance, as the paper's minibatch statistic
    ref_u, ref_ildj = _reference_inverse(x, p["beta"], p["gamma"], m, v)
    np.testing.assert_allclose(u, ref_u, rtol=1e-10)
    np.testing.assert_allclose(ildj, ref_ildj, rtol=1e-10)
    assert not np.allclose(u, b.inverse(x, training=False))


@pytest.mark.parametrize("where", GRADIENT_PLACES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_training_gradients_are_tfs_of_the_batch_norm_formula(setup, where, dtype):
    # Eagerly and in a trace whose custom gradients are released (a `fit` step), the
    # batch norm takes its written-out gradient; in any other trace, TF's (a written-out
    # one would stay in TF's gradient registry). All three equal TF's gradient of the
    # formula, log-det included.
    x, p = setup
    x = tf.constant(x, dtype)
    beta, gamma = tf.constant(p["beta"], dtype), tf.constant(p["gamma"], dtype)
    rng = np.random.RandomState(1)
    du, dlog_det = tf.constant(rng.normal(size=(100, 3)), dtype), tf.constant(rng.normal(size=100), dtype)

    def loss_and_gradients(reference):
        with tf.GradientTape() as tape:
            tape.watch([x, beta, gamma])
            if reference:
                m, v = tf.nn.moments(x, axes=[0])
                u = (x - m) / tf.sqrt(v + EPS) * tf.exp(gamma) + beta
                log_det = tf.zeros(100, dtype) + tf.reduce_sum(gamma - 0.5 * tf.math.log(v + EPS))
            else:
                b = ExpGammaBatchNorm(beta, gamma, tf.zeros(3, dtype), tf.ones(3, dtype))
                u = b.inverse(x, training=True)
                log_det = b.inverse_log_det_jacobian(x, 1, training=True)
            loss = tf.reduce_sum(u * du) + tf.reduce_sum(log_det * dlog_det)
        return (loss, *tape.gradient(loss, [x, beta, gamma]))

    got = written_out_gradients(where, lambda: loss_and_gradients(reference=False))
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    for a, b in zip(got, loss_and_gradients(reference=True), strict=True):
        np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance)


def test_training_normalises_the_batch_at_zero_parameters(setup):
    x, _ = setup
    bn = BatchNormState(3, dtype="float64")
    u = bn(x, training=True).numpy()
    np.testing.assert_allclose(u.mean(0), 0.0, atol=1e-10)
    np.testing.assert_allclose(u.std(0), 1.0, atol=1e-4)


def test_statistics_change_only_through_set_statistics(setup):
    x, _ = setup
    bn = BatchNormState(3, dtype="float64")
    before = [w.numpy().copy() for w in (bn.mean, bn.variance)]
    bn(x, training=True)
    bn.bijector().inverse(x, training=True)
    for w, b in zip((bn.mean, bn.variance), before, strict=True):
        np.testing.assert_array_equal(w.numpy(), b)
    bn.set_statistics(x.mean(0), x.var(0))
    np.testing.assert_allclose(bn.mean.numpy(), x.mean(0))
    # After setting the training set's statistics, evaluation = training on that set.
    np.testing.assert_allclose(bn(x, training=False), bn(x, training=True), rtol=1e-10)
    assert [w.name for w in bn.trainable_weights] == ["beta", "gamma"]


def test_epoch_moments_are_those_of_every_row_normalised_in_training(setup):
    x, _ = setup
    bn = BatchNormState(3, dtype="float64")
    shifted = x * [1.0, 10.0, 0.1] + [0.0, 1000.0, -5.0]  # far from 0: the merge must stay exact
    for start in range(0, 100, 30):  # batches of 30, 30, 30 and 10 rows
        bn(shifted[start:start + 30], training=True)
    bn(shifted, training=False)  # evaluation adds nothing
    assert bn.store_epoch_moments()
    np.testing.assert_allclose(bn.mean.numpy(), shifted.mean(0), rtol=1e-12)
    np.testing.assert_allclose(bn.variance.numpy(), shifted.var(0), rtol=1e-10)
    # The sums are not weights: neither trained, saved nor listed.
    assert [w.name for w in bn.weights] == ["beta", "gamma", "mean", "variance"]


def test_epoch_moments_weigh_later_batches_by_the_window(setup):
    x, _ = setup
    bn = BatchNormState(3, dtype="float64")
    bn.reset_epoch_moments(window=2.0)
    first, second = x[:50], x[50:] + 10.0
    bn(first, training=True)
    bn(second, training=True)
    w = np.exp(-1 / 2.0)  # the first batch's weight, relative to the second's
    mean = (w * first.mean(0) + second.mean(0)) / (1 + w)
    variance = (w * ((first - mean) ** 2).mean(0) + ((second - mean) ** 2).mean(0)) / (1 + w)
    assert bn.store_epoch_moments()
    np.testing.assert_allclose(bn.mean.numpy(), mean, rtol=1e-12)
    np.testing.assert_allclose(bn.variance.numpy(), variance, rtol=1e-10)
    with pytest.raises(ValueError, match="window must be None or > 0 minibatches, got 0"):
        bn.reset_epoch_moments(window=0)


def test_epoch_moments_weigh_over_fewer_batches_where_those_hold_enough_rows():
    # Batches of 450 rows in 3 dimensions: 150 rows a dimension, more than the 100 that
    # ROWS_PER_DIMENSION asks, so a window of 25 minibatches weighs over 300 / 450 < 1: one.
    from tfp_maf.layers.batch_norm import ROWS_PER_DIMENSION

    assert ROWS_PER_DIMENSION == 100
    x = np.random.default_rng(0).normal(size=(900, 3))
    bn = BatchNormState(3, dtype="float64")
    bn.reset_epoch_moments(window=25.0)
    first, second = x[:450], x[450:] + 10.0
    bn(first, training=True)
    bn(second, training=True)
    w = np.exp(-1.0)
    mean = (w * first.mean(0) + second.mean(0)) / (1 + w)
    assert bn.store_epoch_moments()
    np.testing.assert_allclose(bn.mean.numpy(), mean, rtol=1e-12)
    bn.reset_epoch_moments()  # None: every row alike, however many
    bn(first, training=True)
    bn(second, training=True)
    assert bn.store_epoch_moments()
    np.testing.assert_allclose(bn.mean.numpy(), x.mean(0) + [5.0, 5.0, 5.0], rtol=1e-12)


def test_epoch_moments_store_nothing_without_rows_or_when_not_finite(setup):
    x, _ = setup
    bn = BatchNormState(3, dtype="float64")
    bn.set_statistics([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    bn.reset_epoch_moments()
    assert not bn.store_epoch_moments()  # no row since the reset
    bn(np.where(np.arange(100)[:, None] == 3, np.inf, x), training=True)
    assert not bn.store_epoch_moments()  # a diverged step keeps the statistics it had
    np.testing.assert_array_equal(bn.mean.numpy(), [1.0, 2.0, 3.0])


def test_layer_bijector_reads_current_weights(setup):
    x, _ = setup
    bn = BatchNormState(3, dtype="float64")
    bijector = bn.bijector()
    bn.gamma.assign(np.log([2.0, 3.0, 4.0]))
    np.testing.assert_allclose(
        bijector.inverse_log_det_jacobian(x, event_ndims=1),
        (np.log(24.0) - 1.5 * np.log(1 + EPS)) * np.ones(100),
    )


def test_set_statistics_rejects_bad_values():
    bn = BatchNormState(3)
    with pytest.raises(ValueError, match=r"mean of shape \(3,\), got \(2,\)"):
        bn.set_statistics([0.0, 0.0], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="non-finite"):
        bn.set_statistics([0.0, np.nan, 0.0], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="variances must be >= 0"):
        bn.set_statistics([0.0, 0.0, 0.0], [1.0, -1.0, 1.0])


def test_flow_kwargs_routes_training_and_rejects_duplicate_names():
    import tensorflow_probability as tfp

    a = BatchNormState(2, name="bn").bijector()
    b = BatchNormState(2, name="bn").bijector()
    with pytest.raises(ValueError, match="both named 'bn'"):
        flow_kwargs(tfp.bijectors.Chain([a, b]), training=True)
    chain = tfp.bijectors.Chain([tfp.bijectors.Invert(a)])
    assert flow_kwargs(chain, training=True) == {"invert_bn": {"training": True}}
    assert flow_kwargs(chain) == {}
