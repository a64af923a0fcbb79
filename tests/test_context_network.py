"""A trainable network that embeds y before the flow reads it, for every conditional flow."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import zoo_model

import keras_models as km
from keras_models.optimizers import FusedAdam

D, K, E = 3, 4, 6
FLOWS = ["made", "made-mog", "maf5", "maf-mog5", "realnvp5", "nsf5"]


def _context():
    return keras.Sequential([keras.layers.Dense(E, activation="tanh")], name="context")


def _model(name, **kw):
    return zoo_model(name, D, hidden_units=[8], num_layers=2, num_components=2, conditional_dims=K,
                    context_network=_context(), **kw)


def _data(n=64):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, D)).astype(np.float32)
    y = np.eye(K, dtype=np.float32)[rng.integers(0, K, n)]
    return x, y


@pytest.mark.parametrize("name", FLOWS)
def test_the_context_network_trains_with_the_flow_and_is_saved_with_it(name, tmp_path):
    model = _model(name)
    assert model.context_dims == E
    context_kernel = model.context_network.layers[0].kernel
    assert any(v is context_kernel for v in model.trainable_variables)
    before = context_kernel.numpy().copy()
    x, y = _data()
    model.compile(optimizer=FusedAdam(1e-2))
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    assert not np.allclose(context_kernel.numpy(), before), "fit did not train the context network"
    assert model.sample(5, y=y[0], seed=0).shape == (5, D)
    path = str(tmp_path / "model.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    np.testing.assert_allclose(again.log_prob(x[:8], y[:8]), model.log_prob(x[:8], y[:8]), rtol=1e-5, atol=1e-5)


def test_the_exported_model_takes_y_itself(tmp_path):
    model = _model("nsf5")
    x, y = _data(8)
    model.export(str(tmp_path / "exported"), verbose=False)
    served = tf.saved_model.load(str(tmp_path / "exported"))
    np.testing.assert_allclose(served.log_prob(x, y), model.log_prob(x, y), rtol=1e-5, atol=1e-5)
    assert served.sample(tf.constant(4), tf.constant([1, 2]), tf.constant(y[:4])).shape == [4, D]


def test_a_context_network_is_refused_where_it_cannot_work():
    with pytest.raises(ValueError, match="unconditional"):
        km.MAF(D, hidden_units=[8], context_network=_context())
    with pytest.raises(ValueError, match="must be a Keras layer"):
        km.MAF(D, hidden_units=[8], conditional_dims=K, context_network=lambda y: y)
    with pytest.raises(ValueError, match=r"embedding \[N, E\]"):
        km.MAF(D, hidden_units=[8], conditional_dims=K, context_network=keras.layers.Reshape((2, 2)))
    with pytest.raises(TypeError, match="Gaussian takes no keyword 'context_network'"):
        km.build("gaussian", D, conditional_dims=K, context_network=_context())


@pytest.mark.parametrize("batch_size", [None, 16], ids=["one_call", "streamed"])
def test_batch_norm_statistics_and_the_noise_map_read_the_embedding(batch_size):
    """The statistics passes and `figures.to_noise` drive the bijectors one by one: they
    must give each the embedding, as the distribution does."""
    from keras_models import figures

    model = _model("maf5")
    x, y = _data()
    model.set_batch_norm_statistics(x, y, batch_size=batch_size)
    u = figures.to_noise(model, x, y)
    # The last batch norm (beta 0, gamma 0: untrained) standardises what reaches it with
    # those rows' own statistics, if the pass and the map gave the layers the same input.
    np.testing.assert_allclose(u.mean(0), np.zeros(D), atol=1e-4)
    np.testing.assert_allclose(u.var(0), np.ones(D), atol=1e-3)
