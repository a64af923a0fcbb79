"""MADEMoG: one-pass log_prob, exact sampling, conditioning, MAF MoG."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_maf import MADEMoG, MADENetwork, MaskedAutoregressive
from tfp_maf.testing import randomize_weights

tfd, tfb = tfp.distributions, tfp.bijectors


def _mog(dtype="float32", D=2, conditional_dims=None, seed=0):
    made = MADENetwork(D, [16], num_components=3, seed=seed, dtype=dtype,
                conditional_dims=conditional_dims, order="right-to-left")
    randomize_weights(made, seed, scale=0.3)
    return MADEMoG(made)


def test_log_prob_matches_a_hand_computed_mixture():
    dist = _mog("float64", D=3)
    x = np.random.RandomState(1).normal(size=(4, 3))
    logits, loc, log_scale = dist.made(x)
    w = tf.nn.softmax(logits).numpy()
    dens = np.sum(
        w * np.exp(-0.5 * ((x[..., None] - loc) / np.exp(log_scale)) ** 2)
        / (np.sqrt(2 * np.pi) * np.exp(log_scale)), axis=-1,
    )
    np.testing.assert_allclose(dist.log_prob(x), np.log(dens).sum(-1), rtol=1e-10)


def test_samples_agree_with_log_prob():
    """Per-bin frequencies of 40,000 samples against exp(log_prob) integrated on the bins."""
    dist = _mog("float64")
    edges = np.linspace(-4, 4, 9)
    fine = np.linspace(-4, 4, 801)[:-1] + 0.005  # midpoints of 0.01-wide cells
    xx, yy = np.meshgrid(fine, fine, indexing="ij")
    cell = np.exp(dist.log_prob(np.stack([xx.ravel(), yy.ravel()], -1)).numpy()) * 1e-4
    expected = cell.reshape(8, 100, 8, 100).sum(axis=(1, 3))
    n = 40_000
    s = dist.sample(n, seed=5).numpy()
    observed = np.histogram2d(s[:, 0], s[:, 1], bins=[edges, edges])[0] / n
    se = np.sqrt(expected * (1 - expected) / n) + 1e-4
    assert expected.sum() > 0.5  # the bins hold most of the mass: a real comparison
    assert np.all(np.abs(observed - expected) < 5 * se), (observed - expected) / se


def test_sampling_is_seeded_and_exact_in_d_passes(mode):
    dist = _mog(D=4)
    a = mode(lambda: dist.sample(6, seed=(1, 2)))
    b = mode(lambda: dist.sample(6, seed=(1, 2)))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (6, 4) and np.all(np.isfinite(a))


def test_conditional():
    dist = _mog(D=2, conditional_dims=3)
    x = tf.random.normal([5, 2])
    y1, y2 = tf.constant([1.0, 0.0, 0.0]), tf.constant([0.0, 1.0, 0.0])
    assert not np.allclose(dist.log_prob(x, conditional_input=y1), dist.log_prob(x, conditional_input=y2))
    assert dist.sample(7, seed=1, conditional_input=y1).shape == (7, 2)
    assert dist.sample(5, seed=1, conditional_input=tf.ones([5, 3])).shape == (5, 2)
    with pytest.raises(ValueError, match="pass conditional_input"):
        dist.log_prob(x)


def test_is_the_base_of_maf_mog_and_gradients_reach_every_weight():
    base = _mog(D=2)
    made = MADENetwork(2, [8])
    flow = tfd.TransformedDistribution(base, MaskedAutoregressive(made))
    x = tf.random.normal([16, 2])
    with tf.GradientTape() as tape:
        loss = -tf.reduce_mean(flow.log_prob(x))
    variables = base.made.trainable_variables + made.trainable_variables
    for v, g in zip(variables, tape.gradient(loss, variables), strict=True):
        assert g is not None and np.all(np.isfinite(g)), v.path
    assert flow.sample(3, seed=1).shape == (3, 2)


def test_wrong_head_raises():
    with pytest.raises(ValueError, match="mixture head"):
        MADEMoG(MADENetwork(2, [4]))
    with pytest.raises(ValueError, match="Gaussian head"):
        MaskedAutoregressive(MADENetwork(2, [4], num_components=2))
    with pytest.raises(ValueError, match=r"2 variables.*\[3, 5\]"):
        _mog().log_prob(tf.zeros([3, 5]))


def test_sample_within_full_passes_is_the_converters_graph():
    # Within full_passes a sample is the textbook loop of D full passes: no switch_case
    # (the compiled sampler's choice of chunk size), which neither tf2onnx nor LiteRT's
    # converter takes. The sample path ignored it; sample_from_noise followed it.
    from tfp_maf import sampling

    made = MADENetwork(3, hidden_units=[8], num_components=2, seed=0)
    randomize_weights(made, seed=1, scale=0.3)
    dist = MADEMoG(made)

    def op_types(function):  # of a signature's graph: a batch of any size, as exports trace
        graph = tf.function(function, input_signature=[tf.TensorSpec([], tf.int32)]).get_concrete_function()
        definition = graph.graph.as_graph_def()
        return {node.op for node in definition.node} | {
            node.op for inner in definition.library.function for node in inner.node_def}  # bodies of loops

    draw = lambda n: dist.sample(n, seed=[1, 2])  # noqa: E731
    assert {"Case", "StatelessCase"} & op_types(draw)  # the compiled sampler, as a rule
    with sampling.full_passes():
        assert not {"Case", "StatelessCase"} & op_types(draw)
        inside = dist.sample(5, seed=[1, 2])
    np.testing.assert_allclose(inside, draw(5), rtol=1e-5, atol=1e-5)
