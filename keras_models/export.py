"""SavedModel export with `log_prob` and `sample` serving signatures."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_models.density_model import DensityModel

__all__ = ["export_saved_model"]


def export_saved_model(model: DensityModel, path: str) -> None:
    """Writes a TensorFlow SavedModel serving ``log_prob`` and ``sample``.

    ``log_prob(x)`` (and ``y`` for a conditional model) returns log p per row;
    ``sample(n, seed)`` (and ``y``, one row ``[K]``) returns ``[n, D]``
    samples, ``seed`` being two int32s. The SavedModel needs TensorFlow only:
    load it with ``tf.saved_model.load(path)`` in a process that never
    imports tfp_maf.
    """
    D, K = model.event_size, model.conditional_dims
    dtype = tf.as_dtype(model.compute_dtype)
    archive = keras.export.ExportArchive()
    archive.track(model)
    x_spec = tf.TensorSpec([None, D], dtype, name="x")
    n_spec = tf.TensorSpec([], tf.int32, name="n")
    seed_spec = tf.TensorSpec([2], tf.int32, name="seed")
    if K is None:
        archive.add_endpoint("log_prob", lambda x: model.log_prob(x), [x_spec])
        archive.add_endpoint("sample", lambda n, seed: model.sample(n, seed=seed), [n_spec, seed_spec])
    else:
        y_spec = tf.TensorSpec([None, K], dtype, name="y")
        archive.add_endpoint("log_prob", lambda x, y: model.log_prob(x, y), [x_spec, y_spec])
        archive.add_endpoint(
            "sample",
            lambda n, seed, y: model.sample(n, y=y, seed=seed),
            [n_spec, seed_spec, tf.TensorSpec([K], dtype, name="y")],
        )
    archive.write_out(path, verbose=False)
