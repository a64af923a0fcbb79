"""The Keras 3 MADE layer: heads, autoregressive property, conditioning, serialization."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_maf
from tfp_maf import MADENetwork, MaskedDense
from tfp_maf.testing import randomize_weights


@pytest.mark.parametrize("num_components", [None, 3])
@pytest.mark.parametrize("conditional_dims", [None, 2])
def test_output_depends_only_on_earlier_variables(num_components, conditional_dims):
    D = 5
    made = MADENetwork(
        D, [12, 12], num_components=num_components, order="random", seed=4, activation="tanh",
        conditional_dims=conditional_dims,
    )
    randomize_weights(made, 4)
    x = tf.constant(np.random.RandomState(0).normal(size=(3, D)), tf.float32)
    y = None if conditional_dims is None else tf.ones([3, conditional_dims])
    rank = np.empty(D, int)
    rank[made.permutation] = np.arange(D)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        outs = made(x, conditional_input=y)
    for out in outs:
        # jac[n, i, ..., j] = d out_i / d x_j (the mixture head has a C axis).
        jac = tape.batch_jacobian(out, x).numpy()
        jac = np.abs(jac).reshape(3, D, -1, D).sum(axis=(0, 2))
        for i in range(D):
            later = rank >= rank[i]
            assert np.all(jac[i, later] == 0), (i, jac)
            earlier = rank < rank[i]
            if earlier.any():
                assert np.all(jac[i, earlier] != 0), (i, jac)


def test_heads_and_shapes():
    made = MADENetwork(3, [8], num_components=4)
    logits, loc, log_scale = made(tf.zeros([2, 7, 3]))
    assert logits.shape == loc.shape == log_scale.shape == (2, 7, 3, 4)
    shift, log_scale = MADENetwork(3, [8])(tf.zeros([3]))
    assert shift.shape == log_scale.shape == (3,)


def test_output_layer_is_one_fused_matmul():
    made = MADENetwork(4, [8, 8], num_components=2)
    assert made.output_layer.units == 4 * 3 * 2
    assert len(made.hidden_layers) == 2


def test_gaussian_head_starts_as_identity():
    shift, log_scale = MADENetwork(3, [8])(tf.random.normal([4, 3]))
    np.testing.assert_array_equal(shift, 0.0)
    np.testing.assert_array_equal(log_scale, 0.0)


def test_conditional_input_changes_output_and_broadcasts():
    made = MADENetwork(3, [8], conditional_dims=2, seed=0)
    randomize_weights(made, 1)
    x = tf.random.normal([5, 3], seed=1)
    a = made(x, conditional_input=tf.constant([1.0, 0.0]))
    b = made(x, conditional_input=tf.constant([0.0, 1.0]))
    assert not np.allclose(a[0], b[0])
    np.testing.assert_allclose(
        a[0], made(x, conditional_input=tf.tile([[1.0, 0.0]], [5, 1]))[0], rtol=1e-6
    )
    assert made(x, conditional_input=tf.zeros([2, 1, 2]))[0].shape == (2, 5, 3)


def test_conditional_without_hidden_layers_feeds_the_output():
    made = MADENetwork(3, [], conditional_dims=2)
    randomize_weights(made, 2)
    a = made(tf.zeros([1, 3]), conditional_input=tf.constant([[1.0, 0.0]]))[0]
    b = made(tf.zeros([1, 3]), conditional_input=tf.constant([[0.0, 1.0]]))[0]
    assert not np.allclose(a, b)


def test_y_feeds_the_first_hidden_layer_only_when_asked():
    """``conditional_input_layers="first_layer"``: one y kernel, into the first hidden
    layer; the later layers see y only through it (the published code's wiring)."""
    made = MADENetwork(4, [8, 8], conditional_dims=2, conditional_input_layers="first_layer", seed=0)
    assert [v.shape for v in made.conditional_kernels] == [(2, 8)]
    every = MADENetwork(4, [8, 8], conditional_dims=2, seed=0)
    assert [v.shape for v in every.conditional_kernels] == [(2, 8), (2, 8)]
    randomize_weights(made, 1)
    x = tf.random.normal([5, 4], seed=1)
    terms = made.conditional_terms(tf.constant([[1.0, 0.0]] * 5))
    assert terms[0].shape == (5, 8) and terms[1] is None
    a = made(x, conditional_input=tf.constant([1.0, 0.0]))
    b = made(x, conditional_input=tf.constant([0.0, 1.0]))
    assert not np.allclose(a[0], b[0])
    # The first hidden layer's pre-activations are x's and y's terms summed, as in a
    # network that takes [x, y] with y's mask all ones.
    first, second, output = *made.hidden_layers, made.output_layer
    y_term = tf.matmul(tf.ones([5, 2]), made.conditional_kernels[0])
    h = tf.nn.relu(tf.matmul(x, first.masked_kernel()) + first.bias + y_term)
    h = tf.nn.relu(tf.matmul(h, second.masked_kernel()) + second.bias)
    out = tf.matmul(h, output.masked_kernel()) + output.bias
    shift, log_scale = made(x, conditional_input=tf.ones([5, 2]))
    np.testing.assert_allclose(tf.reshape(out, [5, 4, 2])[..., 0], shift, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tf.reshape(out, [5, 4, 2])[..., 1], log_scale, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"conditional_input_layers must be one of \('all_layers', 'first_layer'\)"):
        MADENetwork(4, [8], conditional_dims=2, conditional_input_layers="first")


def test_bad_inputs_raise():
    made = MADENetwork(3, [8], conditional_dims=2)
    with pytest.raises(ValueError, match=r"3 variables.*got shape \[4, 5\]"):
        made(tf.zeros([4, 5]), conditional_input=tf.zeros([4, 2]))
    with pytest.raises(ValueError, match=r"2 columns.*\[4, 3\]"):
        made(tf.zeros([4, 3]), conditional_input=tf.zeros([4, 3]))
    with pytest.raises(ValueError, match="event_size must be >= 1"):
        MADENetwork(0)
    with pytest.raises(ValueError, match=r"mask must have shape \[fan_in, 3\]"):
        MaskedDense(3, np.ones((2, 4)))


@pytest.mark.parametrize("num_components", [None, 3])
@pytest.mark.parametrize("hidden_units", [[8], []])
def test_a_log_precision_head_gives_minus_half_its_outputs_as_log_scales(num_components, hidden_units):
    # The same weights: every output as the log-scale head gives it, the scale outputs
    # (read as log-precisions r) turned into log-scales -r / 2. Without hidden layers
    # y's kernel feeds the outputs, and is scaled with them.
    kw = dict(hidden_units=hidden_units, num_components=num_components, conditional_dims=2, seed=0)
    log_scale, log_precision = MADENetwork(3, **kw), MADENetwork(3, scale_parameterization="log_precision", **kw)
    randomize_weights(log_scale, seed=1)
    log_precision.set_weights(log_scale.get_weights())
    x, y = tf.random.normal([4, 3], seed=1), tf.random.normal([4, 2], seed=2)
    a, b = log_scale(x, conditional_input=y), log_precision(x, conditional_input=y)
    for u, v in zip(a[:-1], b[:-1], strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-6)
    np.testing.assert_allclose(-0.5 * a[-1], b[-1], rtol=1e-6)


def test_scale_parameterization_is_checked():
    with pytest.raises(ValueError, match=r"scale_parameterization must be one of \('log_scale', 'log_precision'\)"):
        MADENetwork(3, [8], scale_parameterization="log_variance")
    with pytest.raises(ValueError, match="open head"):
        MADENetwork(3, [8], params=5, scale_parameterization="log_precision")


def test_config_round_trip_rebuilds_the_same_network():
    made = MADENetwork(
        4, [6, 5], num_components=2, activation="tanh", order=[3, 1, 0, 2],
        hidden_degrees="random", conditional_dims=3, seed=7,
        kernel_regularizer=keras.regularizers.L2(1e-6), conditional_input_layers="first_layer",
        scale_parameterization="log_precision",
    )
    config = json.loads(json.dumps(made.get_config()))
    clone = MADENetwork.from_config(config)
    clone.set_weights(made.get_weights())
    x, y = tf.random.normal([2, 4]), tf.random.normal([2, 3])
    for a, b in zip(made(x, conditional_input=y), clone(x, conditional_input=y), strict=True):
        np.testing.assert_array_equal(a, b)
    for m, c in zip(made.masks, clone.masks, strict=True):
        np.testing.assert_array_equal(m, c)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(made))
    assert isinstance(restored, MADENetwork) and restored.num_components == 2
    assert restored.conditional_input_layers == "first_layer" and len(restored.conditional_kernels) == 1
    assert restored.scale_parameterization == "log_precision"


@pytest.mark.parametrize("drawn", [{"order": "random"}, {"hidden_degrees": "random"},
                                   {"order": "random", "hidden_degrees": "random"}])
def test_an_unseeded_random_network_loads_as_it_was_saved(drawn, tmp_path):
    # The config held the word "random" and each load drew a new order: outputs 0.14 to
    # 0.27 away from the saved model's, with no error.
    inputs = keras.Input((4,))
    made = MADENetwork(4, hidden_units=[16], output_kernel_initializer="glorot_uniform", **drawn)
    model = keras.Model(inputs, made(inputs)[0])
    path = str(tmp_path / "made.keras")
    model.save(path)
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(keras.saving.load_model(path)(x), model(x))
    config = made.get_config()
    assert config["order"] == (made.permutation.tolist() if "order" in drawn else "left-to-right")
    if "hidden_degrees" in drawn:
        assert config["hidden_degrees"] == [made.degrees[0].tolist()]


def test_given_hidden_degrees_are_checked():
    made = MADENetwork(3, hidden_units=[4], hidden_degrees=[[1, 2, 2, 1]])
    assert made.degrees[0].tolist() == [1, 2, 2, 1]
    for bad in ([[1, 2, 3, 1]], [[1, 2]], [[1, 2, 2, 1], [1]], [[0.5, 1, 1, 1]]):
        with pytest.raises(ValueError, match=r"one sequence of integers in \[1, 2\] per hidden layer"):
            MADENetwork(3, hidden_units=[4], hidden_degrees=bad)


def test_regularizer_adds_losses_for_every_kernel():
    made = MADENetwork(3, [4, 4], conditional_dims=2, kernel_regularizer=keras.regularizers.L2(1e-6))
    made(tf.zeros([1, 3]), conditional_input=tf.zeros([1, 2]))
    assert len(made.losses) == 3 + 2  # three masked kernels, two y kernels


def test_float64_layer():
    made = MADENetwork(3, [4], dtype="float64")
    out = made(np.zeros((2, 3)))
    assert out[0].dtype == tf.float64


def _outside_mask(made):
    """The largest |kernel entry| outside the masks, over the MADE's masked layers."""
    return max(
        float(np.abs(layer.kernel.numpy() * (1 - layer.mask)).max())
        for layer in made.hidden_layers + [made.output_layer]
    )


class _MovesEveryEntry(keras.optimizers.SGD):
    """An optimizer whose step writes every kernel entry, as entry-mixing ones do."""

    def update_step(self, gradient, variable, learning_rate):
        variable.assign_add(keras.ops.ones_like(variable))


@pytest.mark.parametrize(
    "make_optimizer", [lambda: keras.optimizers.Adam(0.05), _MovesEveryEntry], ids=["adam", "mixing"]
)
def test_kernels_keep_zeros_outside_their_masks_through_training(make_optimizer):
    optimizer = make_optimizer()
    # The forward pass reads the kernels as they are (no mask product per call),
    # so the zeros must come from the initializer and survive every step.
    made = MADENetwork(4, [16, 16], num_components=2, conditional_dims=2, seed=0)
    assert _outside_mask(made) == 0.0
    x, y = tf.random.normal([64, 4], seed=1), tf.random.normal([64, 2], seed=2)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = sum(tf.reduce_mean(p**2) for p in made(x, conditional_input=y))
        grads = tape.gradient(loss, made.trainable_variables)
        by_variable = {id(v): g for v, g in zip(made.trainable_variables, grads, strict=True)}
        for layer in made.hidden_layers + [made.output_layer]:
            grad = by_variable[id(layer.kernel)].numpy()
            assert np.abs(grad).max() > 0
            np.testing.assert_array_equal(grad * (1 - layer.mask), 0.0)  # masked gradient
        optimizer.apply(grads, made.trainable_variables)
    assert _outside_mask(made) == 0.0
    assert np.abs(made.hidden_layers[0].kernel.numpy()).max() > 0.1  # it did train


@pytest.mark.parametrize("blocks", [1, 2])
def test_gradients_masked_by_the_caller_equal_the_masked_products(blocks):
    # DensityModel.train_step reads the kernels as stored and masks the gradients
    # after the tape: the same gradients as the kernel * mask product gives.
    from tfp_maf.layers import kernels_as_stored, mask_gradients

    made = MADENetwork(6, [32, 32], conditional_dims=2, seed=0, kernel_blocks=blocks)
    randomize_weights(made, 1, scale=0.3)
    x, y = tf.random.normal([16, 6], seed=1), tf.random.normal([16, 2], seed=2)

    def gradients():
        with tf.GradientTape() as tape:
            loss = sum(tf.reduce_mean(p**2) for p in made(x, conditional_input=y))
        return tape.gradient(loss, made.trainable_variables)

    expected = gradients()
    with kernels_as_stored():
        raw = gradients()
    # Inside the context the product is gone: some kernel gradients reach outside the masks.
    assert any(np.abs(r.numpy() - e.numpy()).max() > 0 for r, e in zip(raw, expected, strict=True))
    masked = mask_gradients(made, raw, made.trainable_variables)
    for got, want in zip(masked, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert any(layer.layout is not None for layer in made.hidden_layers) == (blocks > 1)


def test_gradient_masks_are_built_from_short_vectors_not_copied_into_the_graph():
    # A NumPy mask in a trace is a constant that every copy of the graph carries (an
    # MNIST MAF (5)'s fit step held 0.8 GB more with them): mask_gradients builds MADE
    # masks, and their blocks, from two vectors of ranks.
    from tfp_maf.layers.gradient_masks import mask_tensor as _mask_tensor

    made = MADENetwork(7, [24, 24], num_components=2, seed=3, order="random", kernel_blocks=3)
    masks = [m for layer in [*made.hidden_layers, made.output_layer] for _, m in layer.kernel_masks()]
    masks += [layer.mask for layer in MADENetwork(7, [24, 24], seed=3, kernel_blocks=1).hidden_layers]
    for mask in masks:
        with tf.Graph().as_default() as graph:
            _mask_tensor(mask, tf.float64)
        sizes = [tf.make_ndarray(op.get_attr("value")).size for op in graph.get_operations() if op.type == "Const"]
        assert max(sizes) <= max(mask.shape), (mask.shape, sizes)
        np.testing.assert_array_equal(_mask_tensor(mask, tf.float64).numpy(), mask)
    not_nested = np.array([[1, 0], [0, 1]], np.float32)  # any other mask is a constant
    np.testing.assert_array_equal(_mask_tensor(not_nested, tf.float32).numpy(), not_nested)


def test_weights_written_with_entries_outside_the_masks_give_the_masked_network():
    made = MADENetwork(3, [8, 8], seed=0)
    randomize_weights(made, 3)
    x = tf.random.normal([5, 3], seed=1)
    expected = made(x)
    # A kernel with entries outside its mask: what files saved before the
    # kernels held the zeros contain, and what a direct assign can write.
    for layer in made.hidden_layers + [made.output_layer]:
        layer.kernel.assign(layer.kernel + 5.0 * (1 - layer.mask))
    raw = made.get_weights()
    assert _outside_mask(made) == 5.0
    clone = MADENetwork(3, [8, 8], seed=0)
    clone.set_weights(raw)  # MADE.set_weights
    for a, b in zip(clone(x), expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    layer = MaskedDense(8, made.hidden_layers[0].mask)
    layer.set_weights(made.hidden_layers[0].get_weights())  # MaskedDense.set_weights
    np.testing.assert_array_equal(layer.kernel.numpy(), made.hidden_layers[0].kernel.numpy() * layer.mask)
    tfp_maf.apply_masks(made)  # after a direct assign
    for a, b in zip(made(x), expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_a_trace_registers_no_gradient_function():
    # TF keeps every function tf.custom_gradient registers, and with it the traced
    # graph: a MADE traced and differentiated in graph after graph must leave none.
    from tfp_maf._platform.compat import gradient_registry

    made = MADENetwork(4, [16, 16], seed=0)
    before = len(gradient_registry())

    @tf.function
    def loss_gradient(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(made(x))
        return tape.gradient(loss, made.trainable_variables)

    for batch in (3, 5):  # two traces
        loss_gradient(tf.ones([batch, 4]))
    assert len(gradient_registry()) == before


@pytest.mark.parametrize("kernel_blocks", [1, 4], ids=["dense", "blocks"])
@pytest.mark.parametrize("as_stored", [False, True], ids=["masked-product", "as-stored"])
def test_traced_graphs_hold_no_mask_sized_constant(kernel_blocks, as_stored):
    # A mask as a constant is a copy in every graph TF keeps of a trace (an MNIST MAF (5)'s
    # fit graph held 250 MiB of them): masks are built from two short vectors where a
    # graph needs them, and not at all where kernels are read as stored.
    made = MADENetwork(40, [64], kernel_blocks=kernel_blocks, seed=0)
    x = tf.zeros([2, 40])

    @tf.function
    def call(x):
        if as_stored:
            with tfp_maf.layers.kernels_as_stored():
                return made(x)
        return made(x)

    graph = call.get_concrete_function(x).graph
    sizes = [int(np.prod(tf.make_ndarray(op.get_attr("value")).shape)) for op in graph.get_operations()
             if op.type == "Const"]
    smallest_mask = min(layer.mask.size for layer in [*made.hidden_layers, made.output_layer])
    assert max(sizes) < smallest_mask, sorted(sizes)[-5:]
    # ...and the values are those of the eager call.
    np.testing.assert_array_equal(call(x)[0].numpy(), made(x)[0].numpy())


def test_each_layer_draws_its_own_initial_weights():
    # One initializer instance shared by the layers drew the same values in each (Keras'
    # random initializers fix their seed when made): hidden_1 was a scaled copy of hidden_0.
    keras.utils.set_random_seed(0)
    made = MADENetwork(30, [40, 40], conditional_dims=40, kernel_blocks=1,
                       output_kernel_initializer="glorot_uniform", seed=0)
    kernels = [made.hidden_layers[0].kernel, made.hidden_layers[1].kernel, made.output_layer.kernel,
               *made.conditional_kernels]
    flat = [np.asarray(k).ravel()[:30 * 40] for k in kernels]
    for i in range(len(flat)):
        for j in range(i + 1, len(flat)):
            both = (flat[i] != 0) & (flat[j] != 0)
            assert abs(np.corrcoef(flat[i][both], flat[j][both])[0, 1]) < 0.2, (i, j)
