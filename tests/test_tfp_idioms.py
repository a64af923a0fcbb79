"""A TFP user's code: `tf.Module` variables, TFP's training idioms, TFP as the oracle.

TFP finds what to train through `tf.Module` (``flow.trainable_variables``). Our weights
live in Keras 3 layers, which `tf.Module` does not walk; these tests hold the line that
every weight of every layer shows there, and that TFP's own idioms train all of them.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from conftest import TOL

import tfp_maf
from keras_models.data import Figure1Density
from tfp_maf.testing import assert_pairs_close, randomize_weights

tfd, tfb = tfp.distributions, tfp.bijectors
D, K = 4, 3


def _ids(variables):
    return sorted(id(v) for v in variables)


def _own(*layers, trainable=None):
    """The layers' `tf.Variable`s (what a Keras 3 variable wraps)."""
    found = []
    for layer in layers:
        pool = {None: layer.variables, True: layer.trainable_variables, False: layer.non_trainable_variables}
        found += [v.value for v in pool[trainable]]
    return found


def _made(conditional_dims=None, seed=0, **kw):
    return tfp_maf.MADENetwork(D, [8], conditional_dims=conditional_dims, seed=seed, **kw)


def _nets(conditional_dims=None, parity="even"):
    copied, transformed = tfp_maf.coupling_partition(D, parity)
    return tfp_maf.CouplingNetworks(len(copied), len(transformed), [8], conditional_dims=conditional_dims)


@pytest.mark.parametrize("conditional_dims", [None, K])
def test_each_bijector_and_distribution_lists_its_layers_variables(conditional_dims):
    made, nets, mog = _made(conditional_dims), _nets(conditional_dims), _made(conditional_dims, num_components=2)
    bn = tfp_maf.BatchNormState(D)
    for owner, layer in [
        (tfp_maf.MaskedAutoregressive(made), made),
        (tfp_maf.AffineCoupling(nets, D), nets),
        (tfp_maf.MADEMoG(mog), mog),
        (bn.bijector(), bn),
    ]:
        name = type(owner).__name__
        assert _ids(owner.trainable_variables) == _ids(_own(layer, trainable=True)), name
        assert _ids(owner.non_trainable_variables) == _ids(_own(layer, trainable=False)), name
        assert _ids(owner.variables) == _ids(_own(layer)), name


def test_compositions_list_every_variable_once():
    mades = [_made(K, seed=i) for i in range(2)]
    nets, mog = _nets(K, "odd"), _made(K, seed=5, num_components=2)
    bn = tfp_maf.BatchNormState(D)
    shared = tfp_maf.MaskedAutoregressive(mades[0], name="again")  # the same MADE a second time
    chain = tfb.Chain([
        tfp_maf.MaskedAutoregressive(mades[0], name="maf_0"),
        bn.bijector(name="bn"),
        tfb.Permute(list(reversed(range(D)))),
        tfb.Invert(tfb.Chain([tfp_maf.MaskedAutoregressive(mades[1], name="maf_1"), shared])),
        tfp_maf.AffineCoupling(nets, D, "odd", name="coupling"),
    ])
    flow = tfd.TransformedDistribution(tfp_maf.MADEMoG(mog), chain)
    layers = [*mades, nets, mog, bn]
    assert _ids(flow.trainable_variables) == _ids(_own(*layers, trainable=True))
    assert _ids(flow.variables) == _ids(_own(*layers))
    assert len(flow.trainable_variables) == sum(len(layer.trainable_variables) for layer in layers)
    # Bound to y, the distribution is still the same variables.
    bound = tfp_maf.bind_kwargs(flow, np.ones((2, K), np.float32), training=True)
    assert _ids(bound.trainable_variables) == _ids(flow.trainable_variables)


class _LazyShiftAndLogScale(keras.layers.Layer):
    """A user's Keras layer that builds on its first call, as Keras layers usually do."""

    def build(self, input_shape):
        self.dense = keras.layers.Dense(2 * (D - input_shape[-1]))
        self.dense.build(input_shape)

    def call(self, x):
        shift, log_scale = tf.split(self.dense(x), 2, axis=-1)
        return shift, log_scale


def test_a_lazily_built_layer_shows_its_variables_from_its_first_call():
    layer = _LazyShiftAndLogScale()
    b = tfp_maf.AffineCoupling(layer, D)
    assert b.trainable_variables == ()  # nothing exists yet
    b.forward(tf.zeros([1, D]))
    assert _ids(b.trainable_variables) == _ids(_own(layer, trainable=True)) and len(b.trainable_variables) == 2


def _conditional_flow():
    """MAF (2) with batch norm over a MADE MoG base, conditional on y."""
    mades = [_made(K, seed=i, order=order) for i, order in enumerate(["left-to-right", "right-to-left"])]
    norms = [tfp_maf.BatchNormState(D, name=f"bn_{i}") for i in range(2)]
    parts = []
    for i, made in enumerate(mades):
        parts += [tfp_maf.MaskedAutoregressive(made, name=f"maf_{i}"), norms[i].bijector()]
    mog = _made(K, seed=7, num_components=2)
    return tfd.TransformedDistribution(tfp_maf.MADEMoG(mog), tfb.Chain(parts)), [*mades, *norms, mog]


def _xy(n=64, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.normal(size=(n, D)).astype(np.float32) * [1, 2, 0.5, 1] + [1, 0, -1, 2]
    return x.astype(np.float32), np.eye(K, dtype=np.float32)[rng.randint(0, K, n)]


def _changed(before, variables):
    return [not np.array_equal(b, v.numpy()) for b, v in zip(before, variables, strict=True)]


def test_a_gradient_tape_loop_with_a_keras_optimizer_trains_every_weight():
    flow, layers = _conditional_flow()
    for layer in layers:  # the output kernels start at zero: give every weight a gradient
        randomize_weights(layer, 1, scale=0.1)
    x, y = _xy()
    given_y = tfp_maf.bind_kwargs(flow, y, training=True)
    variables = flow.trainable_variables
    before = [v.numpy().copy() for v in variables]
    optimizer = keras.optimizers.Adam(1e-2)
    losses = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            loss = -tf.reduce_mean(given_y.log_prob(x))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        losses.append(float(loss))
    assert len(variables) == sum(len(layer.trainable_variables) for layer in layers)
    unchanged = [v.name for v, c in zip(variables, _changed(before, variables), strict=True) if not c]
    assert not unchanged, unchanged
    assert losses[-1] < losses[0], losses


def test_tfp_math_minimize_trains_every_weight():
    flow, layers = _conditional_flow()
    for layer in layers:
        randomize_weights(layer, 2, scale=0.1)
    x, y = _xy(seed=1)
    given_y = tfp_maf.bind_kwargs(flow, y, training=True)
    before = [v.numpy().copy() for v in flow.trainable_variables]
    losses = tfp.math.minimize(
        lambda: -tf.reduce_mean(given_y.log_prob(x)), num_steps=5,
        optimizer=keras.optimizers.Adam(1e-2), trainable_variables=flow.trainable_variables,
    )
    assert all(_changed(before, flow.trainable_variables))
    assert losses[-1] < losses[0], losses.numpy()


def test_variational_inference_with_an_iaf_surrogate_trains_every_weight():
    """An IAF (`tfb.Invert` of our MAF) fitted to an unnormalized target by VI."""
    made = _made(seed=3)
    randomize_weights(made, 3, scale=0.1)
    surrogate = tfd.TransformedDistribution(
        tfd.MultivariateNormalDiag(loc=tf.zeros(D)), tfb.Invert(tfp_maf.MaskedAutoregressive(made, name="iaf"))
    )
    target = tfd.MultivariateNormalDiag(loc=[1.0, -1.0, 0.5, 2.0], scale_diag=[0.5, 2.0, 1.0, 0.3])
    before = [v.numpy().copy() for v in surrogate.trainable_variables]
    assert len(before) == len(made.trainable_variables)
    losses = tfp.vi.fit_surrogate_posterior(
        target.log_prob, surrogate, optimizer=keras.optimizers.Adam(1e-2), num_steps=40,
        sample_size=32, seed=(1, 2), trainable_variables=surrogate.trainable_variables,
    )
    assert all(_changed(before, surrogate.trainable_variables))
    assert np.mean(losses[-10:]) < np.mean(losses[:10]), losses.numpy()


@pytest.mark.parametrize("conditional_dims", [None, 2])
def test_an_iafs_log_prob_and_its_gradients_compile_under_xla(conditional_dims):
    # Its log_prob runs the sampling direction, whose gradient re-runs TF's loop; a
    # tf.cond on the batch size there left FakeParam ops XLA refused.
    made = tfp_maf.MADENetwork(4, hidden_units=[16], conditional_dims=conditional_dims, seed=0)
    randomize_weights(made, seed=1, scale=0.3)
    iaf = tfd.TransformedDistribution(tfd.MultivariateNormalDiag(tf.zeros(4)),
                                      tfb.Invert(tfp_maf.MaskedAutoregressive(made)))
    x = tf.random.stateless_normal([8, 4], seed=[1, 2])
    kwargs = {} if conditional_dims is None else {
        "bijector_kwargs": {"conditional_input": tf.random.stateless_normal([8, 2], seed=[3, 4])}}

    def loss_and_gradients(x):
        with tf.GradientTape() as tape:
            loss = -tf.reduce_mean(iaf.log_prob(x, **kwargs))
        return loss, tape.gradient(loss, made.trainable_variables)

    (xla_loss, xla_gradients), (loss, gradients) = tf.function(loss_and_gradients, jit_compile=True)(x), \
        loss_and_gradients(x)
    np.testing.assert_allclose(xla_loss, loss, rtol=1e-5)
    for a, b in zip(xla_gradients, gradients, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_custom_loop_reaches_the_likelihood_fit_reaches():
    """Same model, same start, same batches: TFP's loop and Keras' fit end within 2 s.e."""
    import keras_models as km

    data = Figure1Density()
    x, x_test = data.sample(2000, 0).astype(np.float32), data.sample(2000, 1).astype(np.float32)
    batches = [x[i : i + 100] for i in range(0, len(x), 100)] * 8  # 8 epochs, 160 steps

    def trained(custom: bool):
        keras.utils.set_random_seed(0)
        model = km.MAF(2, hidden_units=[32], num_layers=2, batch_norm=False, seed=0)
        model.adapt(x)  # the columns' statistics, which fit would take itself
        optimizer = keras.optimizers.Adam(3e-3)
        if custom:
            flow = model.distribution()  # a plain TFP distribution over the model's layers
            variables = flow.trainable_variables

            @tf.function
            def step(batch):
                with tf.GradientTape() as tape:
                    loss = -tf.reduce_mean(flow.log_prob(batch)) + tf.add_n(model.losses)
                optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))

            for batch in batches:
                step(batch)
        else:
            model.compile(optimizer=optimizer, jit_compile=False)
            model.fit(tf.data.Dataset.from_tensor_slices(x).batch(100).repeat(8), epochs=1, verbose=0)
        return model.log_prob(x_test).numpy()

    ours, keras_fit = trained(custom=True), trained(custom=False)
    two_se = 2 * np.std(keras_fit) / np.sqrt(len(keras_fit))
    assert abs(ours.mean() - keras_fit.mean()) < two_se, (ours.mean(), keras_fit.mean(), two_se)
    assert keras_fit.mean() > -3.9  # it learned: N(0, I) on this density gives about -4.1


# -- TFP's own bijectors fed the same networks are the reference -------------------------


def _data(dtype, shape, seed):
    return tf.constant(np.random.RandomState(seed).normal(size=shape), dtype=dtype)


@pytest.mark.parametrize("conditional_dims", [None, K], ids=["unconditional", "conditional"])
def test_masked_autoregressive_equals_tfp_masked_autoregressive_flow(conditional_dims, dtype):
    made = tfp_maf.MADENetwork(D, [16, 16], order="random", seed=3, conditional_dims=conditional_dims, dtype=dtype.name)
    randomize_weights(made, 3)
    ours = tfp_maf.MaskedAutoregressive(made)
    theirs = tfb.MaskedAutoregressiveFlow(shift_and_log_scale_fn=made)
    u, x = _data(dtype, [6, D], 16), _data(dtype, [6, D], 17)
    kw = {} if conditional_dims is None else {"conditional_input": _data(dtype, [6, K], 18)}
    assert_pairs_close(_directions(ours, theirs, u, x, kw), "MaskedAutoregressive vs tfb.MaskedAutoregressiveFlow",
                       **TOL[dtype])


@pytest.mark.parametrize("parity", ["even", "odd"])
@pytest.mark.parametrize("conditional_dims", [None, K], ids=["unconditional", "conditional"])
def test_affine_coupling_equals_tfp_real_nvp(conditional_dims, parity, dtype):
    """Real NVP copies the first ``num_masked`` variables; a `tfb.Permute` puts ours there."""
    copied, transformed = tfp_maf.coupling_partition(D, parity)
    nets = tfp_maf.CouplingNetworks(len(copied), len(transformed), [16], conditional_dims=conditional_dims,
                                    dtype=dtype.name)
    randomize_weights(nets, 4)
    ours = tfp_maf.AffineCoupling(nets, D, parity)
    to_front = tfb.Permute(np.concatenate([copied, transformed]))
    real_nvp = tfb.RealNVP(
        num_masked=len(copied), shift_and_log_scale_fn=lambda x0, _, **kw: nets(x0, **kw), name="real_nvp"
    )
    theirs = tfb.Chain([tfb.Invert(to_front), real_nvp, to_front])
    u, x = _data(dtype, [6, D], 20), _data(dtype, [6, D], 21)
    kw = {} if conditional_dims is None else {"conditional_input": _data(dtype, [6, K], 22)}
    theirs_kw = {"real_nvp": kw} if kw else {}
    assert_pairs_close(_directions(ours, theirs, u, x, kw, theirs_kw), "AffineCoupling vs tfb.RealNVP",
                       **TOL[dtype])


def _directions(ours, theirs, u, x, kw, theirs_kw=None):
    theirs_kw = kw if theirs_kw is None else theirs_kw
    return {
        "forward": (ours.forward(u, **kw), theirs.forward(u, **theirs_kw)),
        "inverse": (ours.inverse(x, **kw), theirs.inverse(x, **theirs_kw)),
        "fldj": (ours.forward_log_det_jacobian(u, 1, **kw), theirs.forward_log_det_jacobian(u, 1, **theirs_kw)),
        "ildj": (ours.inverse_log_det_jacobian(x, 1, **kw), theirs.inverse_log_det_jacobian(x, 1, **theirs_kw)),
    }


def test_a_users_tf_function_does_not_autograph_convert_our_code(capsys):
    # AutoGraph converts every function a tf.function calls unless it is exempt, as TF,
    # TFP and Keras are: converting ours cost about a second of a process's first trace.
    # Its log (a public setting) prints each converted function's new source.
    import keras_models

    model = keras_models.MAF(3, num_layers=1, hidden_units=[8], conditional_dims=2)
    x, y = tf.TensorSpec([None, 3]), tf.TensorSpec([None, 2])
    tf.autograph.set_verbosity(3, alsologtostdout=True)
    try:
        tf.function(lambda x, y: model.log_prob(x, y)).get_concrete_function(x, y)
        tf.function(lambda x, y: model.distribution(y).log_prob(x)).get_concrete_function(x, y)
        tf.function(lambda y: model.sample(2, y)).get_concrete_function(y)
        made = tfp_maf.MADENetwork(3, hidden_units=[8], conditional_dims=2, seed=0)
        flow = tfd.TransformedDistribution(tfd.MultivariateNormalDiag(loc=tf.zeros(3)),
                                           tfp_maf.MaskedAutoregressive(made))
        tf.function(lambda x, y: tfp_maf.bind_kwargs(flow, conditional_input=y).log_prob(x)).get_concrete_function(x, y)
    finally:
        tf.autograph.set_verbosity(0)
    converted = [line for line in capsys.readouterr().out.splitlines() if line.startswith("def tf__")]
    assert converted == [], converted


def test_a_flow_bound_to_rows_of_y_has_their_batch_shape_and_draws_independently():
    """The README's TFP example: p(x | y) bound to y [2, K] is a batch of two
    distributions, as TFP's are: sample(3) is [3, 2, D] of distinct draws."""
    made = tfp_maf.MADENetwork(2, hidden_units=[16], conditional_dims=3, output_kernel_initializer="glorot_uniform",
                               seed=0)
    bn = tfp_maf.BatchNormState(2, name="bn")
    flow = tfd.TransformedDistribution(
        tfd.MultivariateNormalDiag(loc=np.zeros(2, np.float32)),
        tfp.bijectors.Chain([tfp_maf.MaskedAutoregressive(made, name="made"), bn.bijector()]))
    given_y = tfp_maf.bind_kwargs(flow, conditional_input=np.eye(3, dtype=np.float32)[[0, 2]])
    assert given_y.batch_shape == [2]
    draws = given_y.sample(3, seed=1).numpy()
    assert draws.shape == (3, 2, 2)
    assert len({tuple(np.round(row, 6)) for row in draws.reshape(-1, 2)}) == 6, draws
    assert given_y.log_prob(draws).shape == [3, 2]
    assert given_y.log_prob(np.zeros(2, np.float32)).shape == [2]  # x broadcast against the batch
    one = tfp_maf.bind_kwargs(flow, conditional_input=np.eye(3, dtype=np.float32)[0])  # y [K]: batch []
    assert one.batch_shape == [] and one.sample(4, seed=2).shape == [4, 2]
