"""Property-based tests (hypothesis): for random sizes, orders, batch shapes, dtypes
and conditioning, every bijector inverts, its log-dets match autodiff, and every model
gives finite log-densities and samples of the right shape."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from conftest import zoo_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfp_maf
from tfp_maf.testing import assert_pairs_close, log_det_pairs, randomize_weights, round_trip_pairs


def SETTINGS(max_examples):  # noqa: N802 (reads as a decorator)
    # Each example builds Keras layers and compiles the XLA sampler (seconds): few
    # examples, no deadline, and the same examples on every run (derandomize).
    return settings(max_examples=max_examples, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])



TOL = {"float32": dict(rtol=5e-4, atol=5e-4), "float64": dict(rtol=1e-8, atol=1e-8)}

sizes = st.integers(1, 20)
hidden = st.lists(st.integers(1, 24), min_size=0, max_size=2)
orders = st.sampled_from(["left-to-right", "right-to-left", "random"])
dtypes = st.sampled_from(["float32", "float64"])
conditioning = st.one_of(st.none(), st.integers(1, 3))
batch_shapes = st.sampled_from([(1,), (5,), (2, 3)])


def _inputs(seed, batch_shape, D, K, dtype):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(*batch_shape, D)).astype(dtype)
    y = None if K is None else rng.normal(size=(*batch_shape, K)).astype(dtype)
    return tf.constant(x), (None if y is None else tf.constant(y))


def _check_bijector(bijector, D, batch_shape, K, dtype, seed):
    u, y = _inputs(seed, batch_shape, D, K, dtype)
    x, _ = _inputs(seed + 1, batch_shape, D, K, dtype)
    kwargs = tfp_maf.flow_kwargs(bijector, conditional_input=y)
    pairs = round_trip_pairs(bijector, u, x, kwargs)
    for actual, _ in pairs.values():
        assert np.all(np.isfinite(actual.numpy())), f"{bijector.name}: non-finite values"
    assert_pairs_close(pairs, bijector.name, **TOL[dtype])
    # Log-dets against autodiff on the flattened batch ([N, D], as batch_jacobian needs).
    flat = lambda t: None if t is None else tf.reshape(t, [-1, t.shape[-1]])  # noqa: E731
    flat_kwargs = tfp_maf.flow_kwargs(bijector, conditional_input=flat(y))
    assert_pairs_close(log_det_pairs(bijector, flat(u), flat(x), flat_kwargs), bijector.name, **TOL[dtype])


@SETTINGS(6)
@given(D=sizes, hidden_units=hidden, order=orders, dtype=dtypes, K=conditioning,
       batch_shape=batch_shapes, seed=st.integers(0, 2**16))
def test_masked_autoregressive(D, hidden_units, order, dtype, K, batch_shape, seed):
    made = tfp_maf.MADENetwork(D, hidden_units=hidden_units, order=order, conditional_dims=K,
                        seed=seed, dtype=dtype)
    randomize_weights(made, seed)
    _check_bijector(tfp_maf.MaskedAutoregressive(made), D, batch_shape, K, dtype, seed)


@SETTINGS(8)
@given(D=st.integers(2, 20), hidden_units=hidden, parity=st.sampled_from(["even", "odd"]),
       dtype=dtypes, K=conditioning, batch_shape=batch_shapes, seed=st.integers(0, 2**16))
def test_affine_coupling(D, hidden_units, parity, dtype, K, batch_shape, seed):
    copied, transformed = tfp_maf.coupling_partition(D, parity)
    nets = tfp_maf.CouplingNetworks(len(copied), len(transformed), hidden_units or [8],
                                    conditional_dims=K, dtype=dtype)
    randomize_weights(nets, seed)
    _check_bijector(tfp_maf.AffineCoupling(nets, D, parity), D, batch_shape, K, dtype, seed)


@SETTINGS(12)
@given(D=sizes, dtype=dtypes, batch_shape=batch_shapes, seed=st.integers(0, 2**16))
def test_exp_gamma_batch_norm(D, dtype, batch_shape, seed):
    rng = np.random.default_rng(seed)
    bn = tfp_maf.ExpGammaBatchNorm(*(rng.normal(size=D).astype(dtype) for _ in range(3)),
                                   rng.uniform(0.1, 3.0, size=D).astype(dtype))
    _check_bijector(bn, D, batch_shape, None, dtype, seed)


MODELS = ["made", "made-mog", "maf5", "maf-mog5", "realnvp5", "nsf5"]


@SETTINGS(8)
@given(name=st.sampled_from(MODELS), D=sizes, hidden_units=st.lists(st.integers(1, 24), min_size=1, max_size=2),
       K=conditioning, n=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_models_give_finite_densities_and_samples(name, D, hidden_units, K, n, seed):
    if name.startswith("realnvp") and D < 2:
        D = 2  # a coupling layer needs two halves
    model = zoo_model(name, D, hidden_units=hidden_units, num_components=3, conditional_dims=K, seed=seed)
    for layer in model.layers:
        randomize_weights(layer, seed, scale=0.1)
    x, y = _inputs(seed, (n,), D, K, "float32")
    log_p = model.log_prob(x, y).numpy()
    assert log_p.shape == (n,) and np.all(np.isfinite(log_p))
    samples = model.sample(n, y=y, seed=seed).numpy()
    assert samples.shape == (n, D) and np.all(np.isfinite(samples))
