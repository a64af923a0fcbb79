"""MADE kernels stored in degree blocks: the same network, files and training as dense.

`tfp_maf.layers.block_layout` stores a MADE kernel without most of its mask's zeros
(`MaskedDense(blocks=G)`, `MADENetwork(kernel_blocks=...)`). These tests hold it to the
dense storage: values, gradients, sampling, saved files in both directions, Adam's state
and a run's best weights from a file of any storage, and training step by step; and
"auto" chooses them on a CPU only.
"""

from __future__ import annotations

import functools
import json
import warnings
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_models
from keras_models import kernel_storage
from keras_models.optimizers import FusedAdam
from tfp_maf import MADENetwork, MaskedDense, devices, sampling
from tfp_maf._platform.compat import adam_slots, read_model_record
from tfp_maf.layers import sublayers
from tfp_maf.layers.block_layout import BlockLayout, auto_blocks, reorder
from tfp_maf.testing import randomize_weights

D = 6


def _made_masks(seed, hidden=(16, 12), order="random", degrees="random", repeat=2):
    made = MADENetwork(D, list(hidden), order=order, hidden_degrees=degrees, seed=seed, kernel_blocks=1)
    return [*made.masks[:-1], np.repeat(made.masks[-1], repeat, axis=1)]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("degrees", ["sequential", "random"])
def test_every_made_mask_has_a_layout_whose_blocks_give_the_dense_product(seed, degrees):
    rng = np.random.default_rng(seed)
    for mask in _made_masks(seed, degrees=degrees):
        for blocks in (2, 3, 5):
            layout = BlockLayout.of(mask, blocks)
            if layout is None:  # only when one block would hold the whole kernel
                continue
            assert layout.stored < mask.size
            dense = rng.normal(size=mask.shape).astype(np.float32) * mask
            parts = layout.split(dense)
            np.testing.assert_array_equal(layout.merge(parts), dense)
            np.testing.assert_array_equal(layout.merge([tf.constant(p) for p in parts]).numpy(), dense)
            # Nothing outside the blocks is lost: their entries hold every unmasked weight.
            assert sum(int((p != 0).sum()) for p in parts) == int((dense != 0).sum())
            x = rng.normal(size=(5, mask.shape[0])).astype(np.float32)
            blocks_in = [None if p.shape[0] == 0 else tf.constant(p) for p in parts]
            np.testing.assert_allclose(layout.matmul(tf.constant(x), blocks_in), x @ dense, rtol=1e-5, atol=1e-5)


def test_a_block_of_units_that_see_no_input_is_none_and_merges_as_zeros():
    mask = np.arange(3)[:, None] < np.array([0, 0, 2, 3])[None, :]  # units 0 and 1 see nothing
    layout = BlockLayout.of(mask, 2)
    assert layout.depths == (0, 3)
    block = np.arange(6.0).reshape(3, 2) * layout.block_masks[1]  # float64
    dense = layout.merge([None, block])
    assert dense.dtype == np.float64 and not dense[:, :2].any()
    np.testing.assert_array_equal(layout.merge([None, tf.constant(block)]).numpy(), dense)
    np.testing.assert_array_equal(layout.matmul(tf.ones([1, 3], tf.float64), [None, tf.constant(block)]),
                                  np.ones([1, 3]) @ dense)


@pytest.mark.parametrize("have, want", [
    (None, None), (None, [0, 1, 2, 3, 4, 5]), ([5, 4, 3, 2, 1, 0], None), ([4, 5, 2, 3, 0, 1], None),
    (None, [2, 0, 5, 1, 4, 3]), ([2, 0, 5, 1, 4, 3], [5, 4, 3, 2, 1, 0]),
])
def test_reorder_puts_units_in_the_order_asked_with_the_gathers_gradient(have, want):
    rng = np.random.default_rng(0)
    units = rng.normal(size=(3, 6))  # column u holds unit u
    x = tf.constant(units if have is None else units[:, have])
    expected = units if want is None else units[:, want]
    weights = tf.constant(rng.normal(size=(3, 6)))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        got = reorder(x, have, want)
        position = np.argsort(np.arange(6) if have is None else have)
        gathered = tf.gather(x, position[np.arange(6) if want is None else want], axis=-1)
        loss, reference = tf.reduce_sum(got * weights), tf.reduce_sum(gathered * weights)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(tape.gradient(loss, x), tf.convert_to_tensor(tape.gradient(reference, x)))


@pytest.mark.parametrize("order", ["left-to-right", "right-to-left"])
def test_a_blocked_made_passes_its_hidden_units_on_without_a_gather(order):
    # Gathering the units at every blocked layer made MAF (5) of 2 x 512 units train 17%
    # slower than dense (under XLA a gather's gradient is a scatter); in the blocks' own
    # order they pass from layer to layer as they are. The zoo's orders need none at all.
    made = MADENetwork(20, [64, 64], order=order, kernel_blocks=4, conditional_dims=3, seed=0)
    assert all(layer.layout is not None for layer in [*made.hidden_layers, made.output_layer])
    graph = tf.function(lambda x, y: made(x, y)).get_concrete_function(
        tf.TensorSpec([None, 20]), tf.TensorSpec([None, 3])).graph
    gathers = [op for op in graph.get_operations() if op.type in ("GatherV2", "Gather", "ResourceGather")]
    assert gathers, "the biases and y's kernels are put in the blocks' order"
    # ... and nothing with the batch axis (None here) is gathered.
    assert all(op.inputs[0].shape.rank == 1 or op.inputs[0].shape[0] is not None for op in gathers), gathers


def test_a_mask_whose_supports_are_not_nested_has_no_layout():
    assert BlockLayout.of(np.array([[1, 0], [0, 1]]), 2) is None
    assert BlockLayout.of(np.ones((4, 6)), 3) is None  # one block would store it all


def test_auto_blocks_the_paper_sized_mnist_made_and_not_the_small_ones():
    big = MADENetwork(784, [1024], seed=0)
    assert all(layer.layout is not None for layer in [*big.hidden_layers, big.output_layer])
    assert big.output_layer.layout.stored < 0.75 * big.output_layer.mask.size  # 4 blocks: 70%
    small = MADENetwork(43, [512, 512], seed=0)
    assert all(layer.layout is None for layer in [*small.hidden_layers, small.output_layer])
    with pytest.raises(ValueError, match="kernel_blocks"):
        MADENetwork(3, [8], kernel_blocks=0)


def test_auto_blocks_by_the_kernels_size():
    """benchmarks/block_sizes.py: 512 x 512 (2^18 entries) runs slower in any blocks; MNIST
    MAF (5)'s layers (2^19 to 2^22) fastest in 4; MADE MoG's output layer (24M) in 8."""
    assert auto_blocks((512, 512), "cpu") == auto_blocks((43, 512), "cpu") == 1
    assert auto_blocks((784, 1024), "cpu") == auto_blocks((1024, 1568), "cpu") == 4
    assert auto_blocks((1024, 4096), "cpu") == auto_blocks((1024, 23520), "cpu") == 8
    assert auto_blocks((4096, 256), "cpu") == 2  # no block narrower than 128 units
    mog = MADENetwork(784, [1024], num_components=2, seed=0)
    assert [layer.blocks for layer in [*mog.hidden_layers, mog.output_layer]] == [4, 8]


def _storage(model):
    return [layer.blocks for layer in _dense_layers(model)]


#: The storage 0.4.0's "auto" chose on a CPU (rule 1: MNIST-sized kernels in 8 blocks).
RULE_1 = functools.partial(auto_blocks, device="cpu", rule=1)


def _as_saved_before(config: dict, rule: int | None) -> dict:
    """``config`` as 0.5.1 (``rule`` 2) or 0.4.0 (None) saved it: ``"auto"``, the device
    kind and the rule, not the counts."""
    return {**config, "kernel_blocks": "auto", "kernel_blocks_device": "cpu",
            **({} if rule is None else {"kernel_blocks_rule": rule})}


def test_the_storage_is_decided_once_and_saved_as_the_counts():
    """"auto" is resolved when a network is built; its config holds each layer's count,
    and a later release's rule cannot change what a saved network loads as."""
    new = keras_models.MADE(784, hidden_units=[1024], seed=0, kernel_blocks_device="cpu")
    config = new.get_config()
    assert config["kernel_blocks"] == {"made_0": [4, 4]} and "kernel_blocks_device" not in config
    assert "kernel_blocks_rule" not in config
    assert _storage(keras_models.MADE.from_config(config)) == _storage(new) == [4, 4]
    network = MADENetwork(784, [1024], seed=0, kernel_blocks_device="cpu")
    assert network.kernel_blocks_by_layer == (4, 4) and network.get_config()["kernel_blocks"] == [4, 4]
    assert [layer.blocks for layer in MADENetwork(784, [1024], seed=0, kernel_blocks=[2, 1]).hidden_layers] == [2]
    for bad in ([2], "dense", 0, lambda shape: 0):
        with pytest.raises(ValueError, match="kernel_blocks"):
            MADENetwork(784, [1024], seed=0, kernel_blocks=bad)
    with pytest.raises(ValueError, match="kernel_blocks_device"):  # it would change nothing
        MADENetwork(8, [16], seed=0, kernel_blocks=4, kernel_blocks_device="gpu")
    with pytest.raises(ValueError, match=r"must name its MADEs \['made_0'\]"):
        keras_models.MADE(8, hidden_units=[16], kernel_blocks={"made_0": [1, 1], "made_1": [1, 1]})


def test_a_config_of_an_earlier_release_loads_with_the_storage_it_chose():
    """0.5.1 saved "auto" with its rule, 0.4.0 "auto" alone (rule 1: MNIST-sized kernels in
    8 blocks): each is rebuilt with the storage it chose, which its optimizer state fits."""
    assert auto_blocks((784, 1024), "cpu", rule=1) == 8
    config = keras_models.MADE(784, hidden_units=[1024], seed=0).get_config()
    assert _storage(keras_models.MADE.from_config(_as_saved_before(config, None))) == [8, 8]
    assert _storage(keras_models.MADE.from_config(_as_saved_before(config, 2))) == [4, 4]
    network = MADENetwork(784, [1024], seed=0).get_config()
    assert [layer.blocks for layer in MADENetwork.from_config(_as_saved_before(network, None)).hidden_layers] == [8]
    with pytest.raises(ValueError, match="kernel_blocks_rule"):
        MADENetwork.from_config(_as_saved_before(network, 3))
    # An int was saved with the device kind, which it never read.
    saved_int = {**network, "kernel_blocks": 2, "kernel_blocks_device": "cpu"}
    assert MADENetwork.from_config(saved_int).kernel_blocks_by_layer == (2, 2)


def _saved_by_0_4_0(source, target):
    """A copy of the ``.keras`` file ``source`` whose config is as 0.4.0 wrote it (`_as_saved_before`)."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for item in old.infolist():
            data = old.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                config["config"] = _as_saved_before(config["config"], None)
                data = json.dumps(config).encode()
            new.writestr(item, data)
    return target


def test_a_keras_file_of_the_old_rule_resumes_with_its_adam_state(tmp_path):
    x = np.random.default_rng(0).normal(size=(64, 784)).astype(np.float32)
    model = keras_models.MADE(784, hidden_units=[1024], seed=0, kernel_blocks=RULE_1)
    model.compile(optimizer=FusedAdam(1e-3))
    _fit(model, x, 2)
    model.save(tmp_path / "saved.keras")
    path = _saved_by_0_4_0(tmp_path / "saved.keras", tmp_path / "old.keras")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Keras warns where it skips the optimizer's state
        loaded = keras.saving.load_model(path)
    assert _storage(loaded) == [8, 8] and int(loaded.optimizer.iterations.numpy()) == 2
    for a, b in zip(_dense_moments(loaded, "momentum"), _dense_moments(model, "momentum"), strict=True):
        np.testing.assert_allclose(a, b)


def test_auto_keeps_every_kernel_dense_on_a_gpu(monkeypatch):
    """A GPU takes the plain path: the blocks were measured on CPUs."""
    assert auto_blocks((784, 1024), "gpu") == 1 < auto_blocks((784, 1024), "cpu")
    on_gpu = MADENetwork(784, [1024], seed=0, kernel_blocks_device="gpu")
    assert all(layer.layout is None for layer in [*on_gpu.hidden_layers, on_gpu.output_layer])
    assert MADENetwork(784, [1024], seed=0, kernel_blocks=4).output_layer.layout
    # The default is the device TensorFlow runs on; the config records what it chose.
    monkeypatch.setattr(devices, "device_kind", lambda: "gpu")
    model = keras_models.MADEMoG(784, hidden_units=[1024], num_components=2)
    assert model.get_config()["kernel_blocks"] == {"made_mog": [1, 1]}
    assert all(layer.layout is None for layer in _dense_layers(model))
    with pytest.raises(ValueError, match="'cpu', 'gpu'"):
        keras_models.MAF(3, kernel_blocks_device="tpu")


def test_a_saved_model_loads_with_the_storage_it_was_saved_with(tmp_path):
    """A model saved where "auto" chose dense (a GPU) loads dense on this CPU, Adam and
    all; a config from before the device was recorded chose as a CPU does."""
    x = _data()
    model = keras_models.MADE(D, hidden_units=[1024, 1024], seed=1, kernel_blocks_device="gpu")
    assert all(layer.layout is None for layer in _dense_layers(model))
    assert auto_blocks((1024, 1024), "cpu") > 1  # where this CPU would have chosen blocks
    model.compile(optimizer=FusedAdam(1e-3))
    _fit(model, x, 2)
    model.save(tmp_path / "gpu.keras")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # Keras' "Skipping variable loading for optimizer"
        again = keras.saving.load_model(tmp_path / "gpu.keras")
    assert _storage(again) == [1, 1, 1] and int(again.optimizer.iterations.numpy()) == 2
    np.testing.assert_allclose(again.log_prob(x), model.log_prob(x), rtol=1e-6)
    config = {**model.get_config(), "kernel_blocks": "auto"}  # as 0.3.0 saved it: no device
    assert _storage(keras_models.MADE.from_config(config)) == [1, 8, 1]  # rule 1, on this CPU


def _pair(num_components=None, conditional_dims=None, dtype="float32", order="random"):
    """A dense and a blocked MADE with the same weights (through a weights file)."""
    kwargs = dict(num_components=num_components, conditional_dims=conditional_dims, order=order,
                  seed=3, dtype=dtype)
    dense = MADENetwork(D, [16, 12], kernel_blocks=1, **kwargs)
    blocked = MADENetwork(D, [16, 12], kernel_blocks=3, **kwargs)
    assert all(layer.layout is not None for layer in [*blocked.hidden_layers, blocked.output_layer])
    randomize_weights(dense, 1)
    for a, b in zip([*dense.hidden_layers, dense.output_layer], [*blocked.hidden_layers, blocked.output_layer],
                    strict=True):
        store = {}
        a.save_own_variables(store)
        b.load_own_variables(store)
    for a, b in zip(dense.conditional_kernels, blocked.conditional_kernels, strict=True):
        b.assign(a)
    return dense, blocked


@pytest.mark.parametrize("order", ["random", "left-to-right", "right-to-left"])
@pytest.mark.parametrize("num_components, conditional_dims", [(None, None), (3, 2)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_blocked_made_gives_the_dense_outputs_gradients_and_samples(num_components, conditional_dims, dtype, order):
    dense, blocked = _pair(num_components, conditional_dims, dtype, order)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(7, D)), dtype)
    y = None if conditional_dims is None else tf.constant(rng.normal(size=(7, conditional_dims)), dtype)
    tol = {"float32": 1e-5, "float64": 1e-12}[dtype]
    store = {}
    blocked.output_layer.save_own_variables(store)
    assert store["0"].dtype == dtype
    for a, b in zip(dense(x, y), blocked(x, y), strict=True):
        assert b.dtype == dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    for layer_a, layer_b in zip([*dense.hidden_layers, dense.output_layer],
                                [*blocked.hidden_layers, blocked.output_layer], strict=True):
        np.testing.assert_array_equal(layer_a.masked_kernel(), layer_b.masked_kernel())
        with tf.GradientTape(persistent=True) as tape:
            loss_a = tf.reduce_sum(tf.sin(dense(x, y)[0]))
            loss_b = tf.reduce_sum(tf.sin(blocked(x, y)[0]))
        grad = tape.gradient(loss_a, layer_a.kernel).numpy()
        np.testing.assert_array_equal(grad * (1 - layer_a.mask), 0)
        kept = [b for b in layer_b.kernel_blocks if b is not None]
        got = tape.gradient(loss_b, kept)
        want = [w for w, b in zip(layer_b.layout.split(grad), layer_b.kernel_blocks, strict=True) if b is not None]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    emit = lambda params, t, noise: (params[0] + tf.exp(params[1]) * noise[t], params[1])  # noqa: E731
    noise = tf.constant(rng.normal(size=(4, D)), dtype)
    y4 = None if y is None else y[:4]
    if num_components is None:
        np.testing.assert_allclose(sampling.sample_sequentially(dense, emit, noise, y4)[0],
                                   sampling.sample_sequentially(blocked, emit, noise, y4)[0], rtol=tol, atol=tol)


def _model(blocks, **kwargs):
    return keras_models.MAF(D, hidden_units=[16, 12], num_layers=2, seed=5, kernel_blocks=blocks, **kwargs)


def _data():
    rng = np.random.default_rng(1)
    return rng.normal(size=(64, D)).astype(np.float32)


@pytest.mark.parametrize("suffix", [".weights.h5", ".keras"])
def test_weights_files_load_across_the_two_storages_with_the_same_densities(suffix, tmp_path):
    x = _data()
    dense, blocked = _model(1), _model(3)
    for model in (dense, blocked):
        model.log_prob(x[:2])
        randomize_weights(model, 2, 0.2)
    for source, target in ((dense, blocked), (blocked, dense)):
        path = tmp_path / f"source{suffix}"
        source.save_weights(path) if suffix == ".weights.h5" else source.save(path)
        target.load_weights(path)
        np.testing.assert_allclose(target.log_prob(x), source.log_prob(x), rtol=1e-5)
    # A blocked model's .keras file rebuilds it blocked, with the same densities.
    blocked.save(tmp_path / "blocked.keras")
    again = keras.saving.load_model(tmp_path / "blocked.keras")
    assert _storage(again) == _storage(blocked)
    np.testing.assert_allclose(again.log_prob(x), blocked.log_prob(x), rtol=1e-6)


def _dense_layers(model):
    return [layer for layer in sublayers(model) if isinstance(layer, MaskedDense)]


def _fit(model, x, steps):
    model.fit(x, epochs=1, batch_size=16, steps_per_epoch=steps, shuffle=False, verbose=0)


def _dense_moments(model, slots):
    """Adam's ``slots`` of each MADE kernel, merged dense."""
    index = {"momentum": 0, "velocity": 1}[slots]  # read through the compat module's accessor
    by_variable = {id(v): adam_slots(model.optimizer, v)[index] for v in model.trainable_variables}
    return [by_variable[id(layer.kernel)].numpy() if layer.layout is None else
            layer.layout.merge([None if k is None else by_variable[id(k)].numpy() for k in layer.kernel_blocks])
            for layer in _dense_layers(model)]


def _resume(source, target, x, path, learning_rate):
    """Two Adam steps of ``source`` on ``x``, its weights file at ``path`` loaded into
    ``target`` (compiled alike) with Adam's state: Keras' "Skipping variable loading for
    optimizer" warning fails it."""
    source.compile(optimizer=keras.optimizers.Adam(learning_rate))
    _fit(source, x, 2)
    source.save_weights(path)
    target.compile(optimizer=keras.optimizers.Adam(learning_rate))
    target.optimizer.build(target.trainable_variables)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        target.load_weights(path)
    assert int(target.optimizer.iterations.numpy()) == 2


def test_a_weights_file_records_its_storage_and_one_without_a_record_is_not_guessed(tmp_path):
    """The storage is read from the file (`kernel_storage.storage_record`), never inferred
    from the shapes: a file without the record (0.5.1 and before) loads its weights into
    any storage, and its Adam state only into the storage it fits (Keras says it skips it)."""
    import h5py

    x = _data()
    source, target = _model(3), _model(1)
    _resume(source, target, x, tmp_path / "run.weights.h5", learning_rate=1e-2)  # read, Adam and all
    with h5py.File(tmp_path / "run.weights.h5", "r") as f:
        record = read_model_record(f, kernel_storage.RECORD)
    assert record.tolist() == kernel_storage.storage_record(source).tolist() == [3] * 6
    with h5py.File(tmp_path / "run.weights.h5", "r+") as f:
        del f["vars"][kernel_storage.RECORD]  # as 0.5.1 wrote it
    fresh = _model(1)
    fresh.compile(optimizer=keras.optimizers.Adam(1e-2))
    fresh.optimizer.build(fresh.trainable_variables)
    with pytest.warns(UserWarning, match="optimizer"):
        fresh.load_weights(tmp_path / "run.weights.h5")
    np.testing.assert_allclose(fresh.log_prob(x), source.log_prob(x), rtol=1e-5)
    assert int(fresh.optimizer.iterations.numpy()) == 0


@pytest.mark.parametrize("saved, loaded", [(1, 3), (3, 1), (2, 3)])
def test_training_steps_are_the_same_and_adam_resumes_across_storages(saved, loaded, tmp_path):
    """A run saved with its kernels in one storage (dense, as "auto" chooses on a GPU)
    resumes in another with Adam's state, and both take the same steps from there."""
    x = _data()
    source, target = _model(saved), _model(loaded)
    _resume(source, target, x, tmp_path / "run.weights.h5", learning_rate=1e-2)
    np.testing.assert_allclose(target.log_prob(x), source.log_prob(x), rtol=1e-5)
    # Adam's moments are the source's, kernel by kernel.
    for slots in ("momentum", "velocity"):
        for a, b in zip(_dense_moments(source, slots), _dense_moments(target, slots), strict=True):
            np.testing.assert_array_equal(a, b)
    # From there both take the same steps (up to the order of float sums, which Adam's
    # normalised first steps amplify).
    for model in (source, target):
        _fit(model, x, 3)
    np.testing.assert_allclose(target.log_prob(x), source.log_prob(x), rtol=3e-3)
    for layer in _dense_layers(target):
        np.testing.assert_array_equal(layer.masked_kernel().numpy() * (1 - layer.mask), 0)


def test_a_weights_file_of_the_old_rule_loads_with_adam_state_into_the_new_one(tmp_path):
    """A BSDS300-sized MADE: rule 1 stored its 1,024 x 1,024 kernel in 8 blocks and the
    others dense, rule 2 in 4: a mix of block counts that only the old rule gives."""
    x = np.random.default_rng(0).normal(size=(64, 63)).astype(np.float32)
    source = keras_models.MADE(63, hidden_units=[1024, 1024], seed=0, kernel_blocks=RULE_1)
    target = keras_models.MADE(63, hidden_units=[1024, 1024], seed=0, kernel_blocks_device="cpu")
    assert _storage(source) == [1, 8, 1] and _storage(target) == [1, 4, 1]
    _resume(source, target, x, tmp_path / "run.weights.h5", learning_rate=1e-3)
    for a, b in zip(_dense_moments(source, "velocity"), _dense_moments(target, "velocity"), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_made_mog_and_conditional_models_train_blocked():
    x = _data()
    y = np.eye(2, dtype=np.float32)[np.arange(64) % 2]
    for model in (keras_models.MADEMoG(D, hidden_units=[16], num_components=2, kernel_blocks=3),
                  _model(3, conditional_dims=2)):
        model.compile(optimizer=FusedAdam(1e-3))
        history = model.fit(x, y if model.conditional_dims else None, epochs=2, batch_size=16, verbose=0)
        assert np.all(np.isfinite(history.history["loss"]))


@pytest.mark.parametrize("saved, loaded", [(1, 3), (3, 1), (2, 3)])
def test_a_weights_list_saved_in_another_storage_sets_the_model(saved, loaded):
    """Early stopping's best weights, kept by a run's backup as a `get_weights` list,
    may come from before a change of storage (a resume into blocks, or onto a GPU)."""
    x = _data()
    source, target = _model(saved), _model(loaded)
    for model in (source, target):
        model.log_prob(x[:2])
    randomize_weights(source, 4, 0.2)
    record = kernel_storage.storage_record(source)  # what the backup saves beside the list
    target.set_weights(kernel_storage.weights_list(target, source.get_weights(), record))
    np.testing.assert_allclose(target.log_prob(x), source.log_prob(x), rtol=1e-5)
    same = target.get_weights()
    assert all(a is b for a, b in zip(kernel_storage.weights_list(target, same), same, strict=True))
    # Without a record (a list of 0.5.1 or before) nothing is inferred: Keras reports it.
    unread = source.get_weights()
    assert all(a is b for a, b in zip(kernel_storage.weights_list(target, unread), unread, strict=True))


def test_a_run_backed_up_in_blocks_resumes_with_dense_kernels(tmp_path):
    """A run's backup (`RunBackup`: weights, Adam, early stopping's best weights) made
    with blocks, as "auto" on a CPU, resumes where "auto" keeps the kernels dense (a GPU)."""
    from keras_models.training import RunBackup

    x = _data()

    def run(blocks, epochs):
        model = _model(blocks)
        model.compile(optimizer=FusedAdam(1e-2))
        stopper = keras.callbacks.EarlyStopping(patience=5, restore_best_weights=True)
        backup = RunBackup(tmp_path / "backup", stopper)
        callbacks = [stopper, backup]
        model.fit(x, validation_data=(x,), epochs=epochs, initial_epoch=backup.saved_epoch(), batch_size=16,
                  shuffle=False, verbose=0, callbacks=callbacks)
        return model, stopper

    blocked, stopper = run(3, 2)  # as a run killed after its second epoch
    best = [w.copy() for w in stopper.best_weights]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # Keras' "Skipping variable loading for optimizer"
        dense, resumed = run(1, 2)  # restores the two epochs saved, trains none
    assert int(dense.optimizer.iterations.numpy()) == 2 * 4
    np.testing.assert_allclose(dense.log_prob(x), blocked.log_prob(x), rtol=1e-5)
    # The backed-up best weights came back in the dense storage, with the same density.
    assert [w.shape for w in resumed.best_weights] == [w.shape for w in dense.get_weights()]
    blocked.set_weights(best)
    dense.set_weights(resumed.best_weights)
    np.testing.assert_allclose(dense.log_prob(x), blocked.log_prob(x), rtol=1e-5)


@pytest.mark.parametrize("kernel_blocks", [1, 2])
def test_the_xla_fit_step_reads_its_masks_and_holds_no_mask_sized_constant(kernel_blocks, tmp_path):
    # A mask built from constants is folded back into a constant of its size by TF's and
    # XLA's compilers; the fit step reads each kernel's mask from a variable instead
    # (KernelMask), which is neither a weight of the model nor saved with it.
    import re

    from tfp_maf.layers import hold_kernel_masks

    model = keras_models.MAF(12, hidden_units=[40, 40], num_layers=2, seed=0, kernel_blocks=kernel_blocks)
    model.compile(optimizer=FusedAdam(), jit_compile=True)
    weights = [w.path for w in model.weights]
    x = np.random.default_rng(0).normal(size=(50, 12)).astype(np.float32)
    hold_kernel_masks(model)  # as fit does before it traces its step
    hlo = tf.function(model.train_step, jit_compile=True).experimental_get_compiler_ir(tf.constant(x))(stage="hlo")
    shapes = {tuple(v.shape) for v in model.trainable_variables if v.constraint is not None}
    assert shapes and all(len(s) == 2 for s in shapes)
    constants = {tuple(int(n) for n in m.split(",")) for m in re.findall(r"f32\[(\d+,\d+)\]\{[\d,]*\} constant", hlo)}
    assert not constants & shapes, constants & shapes
    model.fit(x, epochs=1, batch_size=25, verbose=0)
    assert [w.path for w in model.weights] == weights
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    np.testing.assert_allclose(loaded.log_prob(x), model.log_prob(x), rtol=1e-6)
