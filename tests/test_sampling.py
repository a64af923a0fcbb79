"""Mask-aware sampling (tfp_maf.sampling) equals the plain D-pass sampling."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tfp_maf import MADEMoG, MADENetwork, MaskedAutoregressive
from tfp_maf.sampling import Schedule, SequentialPlan, Structure, Tuning, without_xla
from tfp_maf.testing import randomize_weights

# (D, hidden units, conditional dims, order, hidden degrees): no / one / two hidden
# layers, fewer units than inputs (random degrees, some degrees absent), conditioning.
CONFIGS = [
    (5, [16, 16], None, "left-to-right", "sequential"),
    (6, [16], 3, "right-to-left", "sequential"),
    (4, [], 2, "random", "sequential"),
    (9, [5, 7], 2, "random", "random"),
    (43, [64], None, "left-to-right", "sequential"),
]


def _made(config, num_components=None, dtype="float32", **tuning):
    D, hidden, K, order, degrees = config
    made = MADENetwork(D, hidden, num_components=num_components, conditional_dims=K, order=order,
                hidden_degrees=degrees, seed=3, dtype=dtype)
    made.sampling_tuning = Tuning(**tuning)
    randomize_weights(made, seed=1, scale=0.3 / np.sqrt(max(hidden + [D])))
    return made


def _y(config, n, dtype="float32"):
    K = config[2]
    return None if K is None else tf.one_hot(tf.range(n) % K, K, dtype=dtype)


# Steps per block of the loop: the automatic choice (one or two steps a block for these
# small MADEs), and blocks that split D unevenly, leave some degrees without units, or
# exceed D.
BLOCKS = [None, 3, 16]


@pytest.fixture(params=BLOCKS, ids=lambda S: f"S{S or 'auto'}")
def block_steps(request):
    return request.param


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"D{c[0]}-{c[1]}-K{c[2]}-{c[4]}")
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_maf_forward_equals_the_plain_loop(config, mode):
    _maf_forward_equals_the_plain_loop(config, mode)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"D{c[0]}-{c[1]}-K{c[2]}-{c[4]}")
@pytest.mark.parametrize("block", BLOCKS[1:])
def test_maf_forward_equals_the_plain_loop_for_any_block_size(config, block):
    _maf_forward_equals_the_plain_loop(config, "function", block_steps=block)


def _maf_forward_equals_the_plain_loop(config, mode, **tuning):
    b = MaskedAutoregressive(_made(config, **tuning))
    u = tf.random.stateless_normal([32, config[0]], seed=[1, 2])
    y = _y(config, 32)
    fast, plain = b._mask_aware_forward, b._plain_forward
    if mode == "function":
        fast, plain = tf.function(fast), tf.function(plain)
    (x1, a1), (x2, a2) = fast(u, y), plain(u, y)
    np.testing.assert_allclose(x1, x2, atol=1e-4)
    np.testing.assert_allclose(a1, a2, atol=1e-4)
    kw = {} if y is None else {"conditional_input": y}
    np.testing.assert_allclose(b.inverse(x1, **kw), u, atol=1e-4)


@pytest.mark.parametrize("config", [CONFIGS[1], CONFIGS[3]], ids=lambda c: f"D{c[0]}-{c[1]}-K{c[2]}-{c[4]}")
def test_y_into_the_first_hidden_layer_only_samples_as_the_plain_loop(config):
    # The published code's wiring: one y kernel, no y term in the later layers.
    D, hidden, K, order, degrees = config
    first = MADENetwork(D, hidden, conditional_dims=K, order=order, hidden_degrees=degrees, seed=3,
                        conditional_input_layers="first_layer")
    randomize_weights(first, seed=1, scale=0.3 / np.sqrt(max(hidden + [D])))
    assert len(first.conditional_kernels) == 1
    b = MaskedAutoregressive(first)
    u = tf.random.stateless_normal([32, D], seed=[1, 2])
    y = _y(config, 32)
    (x1, a1), (x2, a2) = b._mask_aware_forward(u, y), b._plain_forward(u, y)
    np.testing.assert_allclose(x1, x2, atol=1e-4)
    np.testing.assert_allclose(a1, a2, atol=1e-4)
    np.testing.assert_allclose(b.inverse(x1, conditional_input=y), u, atol=1e-4)


# Two parts that share the batch evenly; three (with padding) for the conditional MADEs,
# with and without hidden layers and with random degrees.
@pytest.mark.parametrize("config, parts", [(CONFIGS[0], 2)] + [(c, 3) for c in CONFIGS[1:4]],
                         ids=lambda v: f"D{v[0]}-{v[1]}-K{v[2]}-{v[4]}" if isinstance(v, tuple) else f"parts{v}")
def test_concurrent_parts_equal_the_plain_loop(config, parts, monkeypatch):
    # Chunks of 8 rows: the batch of 32 goes in `parts` slices of whole chunks (with
    # padding for 3), each run by its own compiled loop.
    _maf_forward_equals_the_plain_loop(config, "eager", chunk_rows=8, parts=parts)
    dist = MADEMoG(_made(config, num_components=3, chunk_rows=8, parts=parts))
    y = _y(config, 32)
    kw = {} if y is None else {"conditional_input": y}
    fast = dist.sample(32, seed=(5, 6), **kw)
    monkeypatch.setattr(MADEMoG, "_mask_aware_sample", MADEMoG._plain_sample)
    np.testing.assert_allclose(fast, dist.sample(32, seed=(5, 6), **kw), atol=1e-4)


def test_parts_are_one_per_core_and_never_more_than_the_chunks():
    schedule = Schedule.of(Structure.of(MADENetwork(43, [512, 512])), Tuning())
    chunk = schedule.chunk_sizes[-1]
    assert schedule.parts_for(1) == 1
    assert schedule.parts_for(chunk) == 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert schedule.parts_for(100 * chunk) == min(cores, 100)
    assert 1 <= schedule.parts_for(None) <= cores


def test_maf_forward_broadcasts_batch_shapes_with_y():
    config = CONFIGS[1]
    b = MaskedAutoregressive(_made(config))
    u = tf.random.stateless_normal([2, 3, 6], seed=[3, 4])
    y = tf.one_hot([0, 1, 2], 3)  # [3, K] broadcasts against [2, 3, D]
    (x1, a1), (x2, a2) = b._mask_aware_forward(u, y), b._plain_forward(u, y)
    assert x1.shape == (2, 3, 6) and a1.shape == (2, 3)
    np.testing.assert_allclose(x1, x2, atol=1e-4)
    np.testing.assert_allclose(a1, a2, atol=1e-4)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"D{c[0]}-{c[1]}-K{c[2]}-{c[4]}")
def test_made_mog_sample_equals_the_plain_loop(config, monkeypatch, block_steps):
    dist = MADEMoG(_made(config, num_components=3, block_steps=block_steps))
    y = _y(config, 40)
    kw = {} if y is None else {"conditional_input": y}
    fast = dist.sample(40, seed=(5, 6), **kw)
    monkeypatch.setattr(MADEMoG, "_mask_aware_sample", MADEMoG._plain_sample)
    plain = dist.sample(40, seed=(5, 6), **kw)
    np.testing.assert_allclose(fast, plain, atol=1e-4)


def test_float64_is_exact_to_rounding(block_steps):
    config = CONFIGS[3]
    b = MaskedAutoregressive(_made(config, dtype="float64", block_steps=block_steps))
    u = tf.random.stateless_normal([16, config[0]], seed=[7, 8], dtype=tf.float64)
    y = _y(config, 16, "float64")
    np.testing.assert_allclose(b._mask_aware_forward(u, y)[0], b._plain_forward(u, y)[0], atol=1e-12)


def test_block_size_keeps_the_in_block_work_small():
    # MNIST-like and MINIBOONE-like MADEs get blocks of several steps; a tiny one, one step.
    def block_steps(made):
        return Schedule.of(Structure.of(made), Tuning()).block_steps

    assert block_steps(MADENetwork(784, [1024])) == 16
    # A block of more than D steps is one block: no empty steps compiled and run.
    assert Schedule.of(Structure.of(MADENetwork(5, [16])), Tuning(block_steps=16)).block_steps == 5
    assert block_steps(MADENetwork(43, [512, 512])) == 1
    assert block_steps(MADENetwork(5, [16, 16])) == 1
    assert Schedule.of(Structure.of(MADENetwork(5, [16, 16])), Tuning(block_steps=4, chunk_rows=8)) == (4, (8,), None)


def test_tuning_refuses_what_is_not_a_positive_count():
    with pytest.raises(ValueError, match="block_steps must be a positive integer"):
        Tuning(block_steps=0)


def test_plan_blocks_cover_every_unit_once():
    made = _made(CONFIGS[3])
    plan = SequentialPlan.of(made)
    assert isinstance(plan, SequentialPlan)
    np.testing.assert_array_equal(made.input_degrees[plan.var_at], np.arange(1, 10))
    for degrees, order, offsets in zip(made.degrees, plan.unit_order, plan.offsets, strict=True):
        assert offsets[0] == 0 and offsets[-1] == len(degrees)
        sorted_degrees = degrees[order]
        for t in range(1, 10):
            assert np.all(sorted_degrees[offsets[t - 1] : offsets[t]] == t)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("block", [None, 3])
def test_gradients_through_sampling_equal_the_plain_loop(mode, block):
    """The XLA-compiled loop is differentiated through the same loop run by TF: the
    gradients with respect to the noise, y and every weight equal the plain loop's."""
    config = CONFIGS[1]
    made = _made(config, block_steps=block)
    b = MaskedAutoregressive(made)
    u = tf.random.stateless_normal([8, config[0]], seed=[9, 9])
    y = _y(config, 8)

    def grads(forward):
        with tf.GradientTape() as tape:
            tape.watch([u, y])
            x, fldj = forward(u, y)
            loss = tf.reduce_sum(tf.square(x)) + tf.reduce_sum(fldj)
        return [tf.convert_to_tensor(g) for g in tape.gradient(loss, [u, y, *made.trainable_variables])]

    fast, plain = b._mask_aware_forward, b._plain_forward
    if mode == "function":
        fast = tf.function(lambda u, y: grads(b._mask_aware_forward))
        plain = tf.function(lambda u, y: grads(b._plain_forward))
        got, want = fast(u, y), plain(u, y)
    else:
        got, want = grads(fast), grads(plain)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("config", [CONFIGS[0], CONFIGS[2], CONFIGS[3]], ids=lambda c: f"D{c[0]}-{c[1]}-K{c[2]}-{c[4]}")
def test_log_precision_heads_sample_as_the_plain_loop(config, monkeypatch):
    # The fast sampler reads the output weights itself (`tfp_maf.sampling.weights_of`), so it must
    # turn the log-precisions into log-scales as the call does; with no hidden layers
    # (CONFIGS[2]) y's kernel feeds the output and gives scale outputs too.
    D, hidden, K, order, degrees = config
    y = _y(config, 40)
    kw = {} if y is None else {"conditional_input": y}
    for num_components in (None, 3):
        made = MADENetwork(D, hidden, num_components=num_components, conditional_dims=K, order=order,
                           hidden_degrees=degrees, seed=3, scale_parameterization="log_precision")
        randomize_weights(made, seed=1, scale=0.3 / np.sqrt(max(hidden + [D])))
        if num_components is None:
            b = MaskedAutoregressive(made)
            u = tf.random.stateless_normal([40, D], seed=[1, 2])
            (x1, a1), (x2, a2) = b._mask_aware_forward(u, y), b._plain_forward(u, y)
            np.testing.assert_allclose(x1, x2, atol=1e-4)
            np.testing.assert_allclose(a1, a2, atol=1e-4)
            np.testing.assert_allclose(b.inverse(x1, **kw), u, atol=1e-4)
        else:
            dist = MADEMoG(made)
            fast = dist.sample(40, seed=(5, 6), **kw)
            with monkeypatch.context() as patch:
                patch.setattr(MADEMoG, "_mask_aware_sample", MADEMoG._plain_sample)
                np.testing.assert_allclose(fast, dist.sample(40, seed=(5, 6), **kw), atol=1e-4)


@pytest.mark.parametrize("family", ["maf", "made-mog"])
def test_tfs_own_loop_samples_no_rows(family):
    # Outside XLA (`without_xla`, as in an export) a batch of no rows once failed in TF's
    # scatter into the empty loop state; its size is known only when the function runs.
    made = MADENetwork(3, [8], num_components=2 if family == "made-mog" else None)
    if family == "maf":
        bijector = MaskedAutoregressive(made)
        draw = tf.function(lambda u: bijector.forward(u), input_signature=[tf.TensorSpec([None, 3])])
    else:
        dist = MADEMoG(made)
        draw = tf.function(lambda n: dist.sample(n, seed=[1, 2]), input_signature=[tf.TensorSpec([], tf.int32)])
    with without_xla():
        empty = draw(tf.zeros([0, 3])) if family == "maf" else draw(tf.constant(0))
        some = draw(tf.zeros([2, 3])) if family == "maf" else draw(tf.constant(2))
    assert empty.shape == [0, 3] and some.shape == [2, 3]
