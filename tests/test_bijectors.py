"""The STYLE.md section 4 checklist, walked by every bijector in both dtypes and modes."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from conftest import (
    BIJECTOR_KINDS,
    CONDITIONAL_KINDS,
    FIXED_KINDS,
    GRADIENT_PLACES,
    TOL,
    make_bijector,
    written_out_gradients,
)

from tfp_maf import MADENetwork, MaskedAutoregressive
from tfp_maf.testing import (
    assert_pairs_close,
    log_det_pairs,
    randomize_weights,
    round_trip_pairs,
)

tfd, tfb = tfp.distributions, tfp.bijectors
D = 4


def _data(dtype, shape, seed):
    return tf.constant(np.random.RandomState(seed).normal(size=shape), dtype=dtype)


CASES = ([(kind, None) for kind in BIJECTOR_KINDS + FIXED_KINDS]
         + [(kind, 3) for kind in CONDITIONAL_KINDS])


def _case(kind, conditional_dims, dtype, seed):
    """A bijector, u, x and the call kwargs (with y for a conditional case)."""
    b = make_bijector(kind, dtype, D, conditional_dims=conditional_dims)
    u, x = _data(dtype, [8, D], seed), _data(dtype, [8, D], seed + 1)
    kw = {} if conditional_dims is None else {"conditional_input": _data(dtype, [8, 3], seed + 2)}
    return b, u, x, kw


@pytest.mark.parametrize("kind, conditional_dims", CASES)
def test_round_trip(kind, conditional_dims, dtype, mode):
    b, u, x, kw = _case(kind, conditional_dims, dtype, 1)
    assert_pairs_close(mode(lambda: round_trip_pairs(b, u, x, kw)), kind, **TOL[dtype])


@pytest.mark.parametrize("kind, conditional_dims", CASES)
def test_log_det_matches_autodiff(kind, conditional_dims, dtype, mode):
    b, u, x, kw = _case(kind, conditional_dims, dtype, 4)
    assert_pairs_close(mode(lambda: log_det_pairs(b, u, x, kw)), kind, **TOL[dtype])


@pytest.mark.parametrize("kind, conditional_dims", CASES)
def test_fused_passes_give_what_tfps_calls_give(kind, conditional_dims, dtype, mode):
    """inverse_and_log_det / forward_and_log_det (uncached, one pass) against TFP's
    inverse, forward and log-det calls, NumPy input included."""
    b, u, x, kw = _case(kind, conditional_dims, dtype, 7)

    def pairs():
        v, inverse_log_det = b.inverse_and_log_det(x.numpy(), **kw)  # NumPy in, as TFP takes it
        y, forward_log_det = b.forward_and_log_det(u, **kw)
        return {
            "inverse": (v, b.inverse(x, **kw)),
            "inverse log-det": (inverse_log_det, b.inverse_log_det_jacobian(x, event_ndims=1, **kw)),
            "forward": (y, b.forward(u, **kw)),
            "forward log-det": (forward_log_det, b.forward_log_det_jacobian(u, event_ndims=1, **kw)),
        }

    assert_pairs_close(mode(pairs), kind, **TOL[dtype])


def test_maf_jacobian_is_triangular_in_its_order(dtype):
    b = make_bijector("maf", dtype, 5)
    perm = b.made.permutation
    x = _data(dtype, [3, 5], 7)
    with tf.GradientTape() as tape:
        tape.watch(x)
        u = b.inverse(x)
    jac = tape.batch_jacobian(u, x).numpy()[:, perm][:, :, perm]  # in the order
    assert np.all(jac[:, np.triu_indices(5, k=1)[0], np.triu_indices(5, k=1)[1]] == 0), jac
    assert np.all(np.abs(np.diagonal(jac, axis1=1, axis2=2)) > 0)
    # ...and some strictly-lower entry is non-zero: the map is not elementwise.
    assert np.any(jac[:, np.tril_indices(5, k=-1)[0], np.tril_indices(5, k=-1)[1]] != 0)


@pytest.mark.parametrize("parity", ["even", "odd"])
def test_coupling_copies_its_half(parity, dtype):
    b = make_bijector(f"coupling_{parity}", dtype, 5)
    u = _data(dtype, [3, 5], 8)
    x = b.forward(u)
    copied = b._copied
    np.testing.assert_array_equal(tf.gather(x, copied, axis=-1), tf.gather(u, copied, axis=-1))
    with tf.GradientTape() as tape:
        tape.watch(u)
        x = b.forward(u)
    jac = tape.batch_jacobian(x, u).numpy()
    identity = np.broadcast_to(np.eye(len(copied)), (3, len(copied), len(copied)))
    np.testing.assert_array_equal(jac[:, copied][:, :, copied], identity)
    assert not np.allclose(
        tf.gather(x, b._transformed, axis=-1), tf.gather(u, b._transformed, axis=-1)
    )


@pytest.mark.parametrize("kind", CONDITIONAL_KINDS)
def test_conditional_input_changes_output_and_broadcasts(kind):
    b = make_bijector(kind, tf.float32, D, conditional_dims=2)
    x = _data(tf.float32, [5, D], 9)
    y1, y2 = _data(tf.float32, [2], 10), _data(tf.float32, [2], 11)
    u1 = b.inverse(x, conditional_input=y1)
    assert not np.allclose(u1, b.inverse(x, conditional_input=y2)), kind
    # One y for the whole batch == that y tiled.
    np.testing.assert_allclose(
        u1, b.inverse(x, conditional_input=tf.tile(y1[None], [5, 1])), rtol=1e-6
    )
    # Two batch dimensions from y against one x: [3, 5] results.
    ys = _data(tf.float32, [3, 1, 2], 12)
    assert b.inverse(x, conditional_input=ys).shape == (3, 5, D)
    assert b.inverse_log_det_jacobian(x, event_ndims=1, conditional_input=ys).shape == (3, 5)


@pytest.mark.parametrize("kind", BIJECTOR_KINDS)
@pytest.mark.parametrize("batch", [[], [7], [2, 3]])
def test_shapes(kind, batch):
    b = make_bijector(kind, tf.float32, D)
    x = _data(tf.float32, batch + [D], 13)
    assert b.inverse(x).shape == batch + [D]
    assert b.forward(x).shape == batch + [D]
    assert b.inverse_log_det_jacobian(x, event_ndims=1).shape == batch
    assert b.forward_log_det_jacobian(x, event_ndims=1).shape == batch


@pytest.mark.parametrize("kind", ["maf", "coupling_even"])
def test_wrong_width_raises(kind):
    b = make_bijector(kind, tf.float32, D)
    with pytest.raises(ValueError, match=r"expected inputs with 4 variables.*got shape \[2, 3\]"):
        b.inverse(tf.zeros([2, 3]))
    with pytest.raises(ValueError, match="4 variables"):
        b.forward(tf.zeros([2, 5]))


@pytest.mark.parametrize("kind", CONDITIONAL_KINDS)
def test_wrong_conditional_input_raises(kind):
    b = make_bijector(kind, tf.float32, D, conditional_dims=2)
    with pytest.raises(ValueError, match=r"expected conditional_input with 2 columns.*\[5, 3\]"):
        b.inverse(tf.zeros([5, D]), conditional_input=tf.zeros([5, 3]))
    with pytest.raises(ValueError, match="pass conditional_input"):
        b.inverse(tf.zeros([5, D]))
    unconditional = make_bijector(kind, tf.float32, D)
    with pytest.raises(ValueError, match="is unconditional"):
        unconditional.inverse(tf.zeros([5, D]), conditional_input=tf.zeros([5, 2]))


@pytest.mark.parametrize("kind", BIJECTOR_KINDS)
def test_finite_for_large_inputs_with_finite_gradients(kind):
    # With the paper's unbounded log-scales, exp(alpha) of a random network
    # overflows at |x| ~ 1e3; the documented soft bound is what keeps it finite.
    b = make_bijector(kind, tf.float32, D, log_scale_bound=10.0)
    x = tf.constant(np.random.RandomState(0).normal(scale=1e3, size=(16, D)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        u = b.inverse(x)
        ildj = b.inverse_log_det_jacobian(x, event_ndims=1)
        total = tf.reduce_sum(u) + tf.reduce_sum(ildj)
    assert np.all(np.isfinite(u)) and np.all(np.isfinite(ildj)), kind
    assert np.all(np.isfinite(tape.gradient(total, x))), kind


def _flow(dtype, conditional_dims=None):
    from tfp_maf import BatchNormState

    layers, bijectors = [], []
    for i, kind in enumerate(["maf", "coupling_even", "maf"]):
        b = make_bijector(kind, dtype, D, conditional_dims=conditional_dims, seed=i)
        bijectors.append(b)
    bn = BatchNormState(D, dtype=dtype.name, name="bn")
    bijectors.insert(1, bn.bijector())
    layers = [b.made if hasattr(b, "made") else b._fn for b in bijectors if b.name != "bn"] + [bn]
    base = tfd.MultivariateNormalDiag(loc=tf.zeros(D, dtype))
    return tfd.TransformedDistribution(base, tfb.Chain(bijectors)), layers


@pytest.mark.parametrize("training", [False, True])
def test_gradients_reach_every_weight(training):
    from tfp_maf import flow_kwargs

    flow, layers = _flow(tf.float32, conditional_dims=2)
    x, y = _data(tf.float32, [32, D], 14), _data(tf.float32, [32, 2], 15)
    kw = flow_kwargs(flow.bijector, conditional_input=y, training=training)
    variables = [v for layer in layers for v in layer.trainable_variables]
    with tf.GradientTape() as tape:
        loss = -tf.reduce_mean(flow.log_prob(x, bijector_kwargs=kw))
    grads = tape.gradient(loss, variables)
    for v, g in zip(variables, grads, strict=True):
        assert g is not None, f"no gradient reaches {v.path}"
        assert np.all(np.isfinite(g)), v.path
        assert np.any(g.numpy() != 0), f"zero gradient for {v.path}"


def test_matches_tfp_masked_autoregressive_flow(dtype, mode):
    """Oracle: TFP's own MAF bijector fed the same shift/log-scale function."""
    made = MADENetwork(D, [16, 16], order="random", seed=3, dtype=dtype.name)
    randomize_weights(made, 3)
    ours = MaskedAutoregressive(made)
    theirs = tfb.MaskedAutoregressiveFlow(shift_and_log_scale_fn=lambda x: made(x))
    u, x = _data(dtype, [6, D], 16), _data(dtype, [6, D], 17)

    def compare():
        return {
            "forward": (ours.forward(u), theirs.forward(u)),
            "inverse": (ours.inverse(x), theirs.inverse(x)),
            "ildj": (
                ours.inverse_log_det_jacobian(x, event_ndims=1),
                theirs.inverse_log_det_jacobian(x, event_ndims=1),
            ),
            "fldj": (
                ours.forward_log_det_jacobian(u, event_ndims=1),
                theirs.forward_log_det_jacobian(u, event_ndims=1),
            ),
        }

    assert_pairs_close(mode(compare), "MaskedAutoregressive vs tfb.MaskedAutoregressiveFlow", **TOL[dtype])


def test_log_prob_runs_each_made_once():
    """A traced log_prob of 5 MAF layers has one MatMul per dense layer."""
    hidden = [16, 16]
    bijectors = []
    for i in range(5):
        made = MADENetwork(D, hidden, order="left-to-right" if i % 2 == 0 else "right-to-left")
        bijectors.append(MaskedAutoregressive(made, name=f"maf_{i}"))
    flow = tfd.TransformedDistribution(
        tfd.MultivariateNormalDiag(loc=tf.zeros(D)), tfb.Chain(bijectors)
    )
    graph = (
        tf.function(flow.log_prob).get_concrete_function(tf.TensorSpec([None, D])).graph
    )
    matmuls = [op for op in graph.get_operations() if "MatMul" in op.type or op.type == "Einsum"]
    assert len(matmuls) == 5 * (len(hidden) + 1), [op.name for op in matmuls]
    # TFP's own MAF evaluates each network twice; we are not measuring a no-op.
    theirs = tfd.TransformedDistribution(
        tfd.MultivariateNormalDiag(loc=tf.zeros(D)),
        tfb.Chain(
            [tfb.MaskedAutoregressiveFlow(lambda x, m=b.made: m(x)) for b in bijectors]
        ),
    )
    graph = tf.function(theirs.log_prob).get_concrete_function(tf.TensorSpec([None, D])).graph
    assert sum("MatMul" in op.type for op in graph.get_operations()) > len(matmuls)


def test_eager_calls_see_weight_updates():
    """No stale cache hit in eager mode after a weight update (see bijectors/_cache.py)."""
    b = make_bijector("maf", tf.float32, D)
    x = _data(tf.float32, [4, D], 18)
    before = b.inverse_log_det_jacobian(x, event_ndims=1).numpy()
    u_before = b.inverse(x).numpy()
    randomize_weights(b.made, seed=99)
    assert not np.allclose(b.inverse(x), u_before)
    assert not np.allclose(b.inverse_log_det_jacobian(x, event_ndims=1), before)


def test_eager_log_prob_never_runs_the_sequential_forward(monkeypatch):
    """Eagerly too, log_prob is one pass per MADE: TFP's forward log-det at x = f^-1(y)
    comes from the inverse pass, not from the D-step forward loop."""
    made = MADENetwork(D, [8], conditional_dims=2, seed=0)
    bijector = tfb.Chain([MaskedAutoregressive(made, name="maf_1"), MaskedAutoregressive(made, name="maf_0")])
    dist = tfd.TransformedDistribution(tfd.MultivariateNormalDiag(loc=tf.zeros(D)), bijector)
    calls = []
    original = MaskedAutoregressive._augmented_forward
    monkeypatch.setattr(
        MaskedAutoregressive, "_augmented_forward", lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    )
    x, y = _data(tf.float32, [5, D], 3), tf.one_hot([0, 1, 0, 1, 1], 2)
    kwargs = {"bijector_kwargs": {f"maf_{i}": {"conditional_input": y} for i in range(2)}}
    lp = dist.log_prob(x, **kwargs)
    assert not calls
    u = bijector.inverse(x, maf_0={"conditional_input": y}, maf_1={"conditional_input": y})
    want = dist.distribution.log_prob(u) + bijector.inverse_log_det_jacobian(
        x, event_ndims=1, maf_0={"conditional_input": y}, maf_1={"conditional_input": y})
    np.testing.assert_allclose(lp, want, rtol=1e-5, atol=1e-5)
    # Another conditional input at the same point is computed, not looked up.
    inner = bijector.bijectors[1]
    u0 = inner.inverse(x, conditional_input=y)
    inner.forward(u0, conditional_input=1 - y)
    assert len(calls) == 1


@pytest.mark.parametrize("kind", BIJECTOR_KINDS + ["mog"])
def test_density_integrates_to_one_on_a_grid(kind):
    """exp(log_prob) of the flow over N(0, I) (or the MADE MoG) sums to ~1 on a 2-D grid."""
    from tfp_maf import MADEMoG

    if kind == "mog":
        made = MADENetwork(2, [16], num_components=3, seed=0, dtype="float64")
        randomize_weights(made, 0)
        dist = MADEMoG(made)
    else:
        b = make_bijector(kind, tf.float64, 2)
        dist = tfd.TransformedDistribution(
            tfd.MultivariateNormalDiag(loc=tf.zeros(2, tf.float64)), b
        )
    lim, n = 12.0, 600
    g = np.linspace(-lim, lim, n)
    xx, yy = np.meshgrid(g, g)
    pts = np.stack([xx.ravel(), yy.ravel()], -1)
    mass = np.exp(dist.log_prob(pts).numpy()).sum() * (g[1] - g[0]) ** 2
    assert abs(mass - 1.0) < 2e-2, (kind, mass)


@pytest.mark.parametrize("kind", ["maf", "coupling_even"])
def test_log_scale_bound_is_exact_inside_its_knee(kind):
    """The bound changes nothing where |alpha| <= bound / 2."""
    free = make_bijector(kind, tf.float64, D)
    bounded = make_bijector(kind, tf.float64, D, log_scale_bound=1e3)
    x = _data(tf.float64, [8, D], 19)
    np.testing.assert_array_equal(free.inverse(x), bounded.inverse(x))
    np.testing.assert_array_equal(
        free.inverse_log_det_jacobian(x, event_ndims=1),
        bounded.inverse_log_det_jacobian(x, event_ndims=1),
    )


@pytest.mark.parametrize("where", GRADIENT_PLACES)
@pytest.mark.parametrize("log_scale_bound, conditional", [(None, False), (2.0, False), (None, True)])
def test_maf_inverse_gradients_are_tfs_of_the_affine_formula(dtype, log_scale_bound, conditional, where):
    # Eagerly and in a trace whose custom gradients are released (a `fit` step), a MAF
    # without y, or with a y its caller aligned with x (`rows_aligned`, as a model's
    # log_prob does), takes its written-out gradient of u = (x - mu) exp(-alpha) and of
    # the log-det; in any other trace, TF's (a written-out one would stay in TF's
    # gradient registry). All three equal TF's gradient of the formula, with respect to
    # x, y and every weight, with upstream gradients on u and on the log-det.
    from tfp_maf.math import rows_aligned, soft_bound

    K = 3 if conditional else None
    made = MADENetwork(D, hidden_units=[16, 16], order="random", conditional_dims=K, seed=0, dtype=dtype.name)
    randomize_weights(made, 0)
    maf = MaskedAutoregressive(made, log_scale_bound=log_scale_bound)
    x, du, dlog_det = _data(dtype, [50, D], 1), _data(dtype, [50, D], 2), _data(dtype, [50], 3)
    y = _data(dtype, [50, K], 4) if conditional else None
    given = {"conditional_input": y} if conditional else {}
    watched = [x, *([y] if conditional else []), *made.trainable_variables]

    def loss_and_gradients(reference):
        with tf.GradientTape() as tape:
            tape.watch(watched[: 2 if conditional else 1])
            if reference:
                shift, log_scale = made(x, **given)
                log_scale = soft_bound(log_scale, log_scale_bound)
                u, log_det = (x - shift) * tf.exp(-log_scale), tf.reduce_sum(-log_scale, axis=-1)
            else:
                with rows_aligned():
                    u, log_det = maf.inverse(x, **given), maf.inverse_log_det_jacobian(x, 1, **given)
            loss = tf.reduce_sum(u * du) + tf.reduce_sum(log_det * dlog_det)
        return (loss, *tape.gradient(loss, watched))

    got = written_out_gradients(where, lambda: loss_and_gradients(reference=False))
    for a, b in zip(got, loss_and_gradients(reference=True), strict=True):
        np.testing.assert_allclose(a, b, **TOL[dtype])
