"""SavedModel export: Keras' ``serve`` endpoint, with ``log_prob`` and ``sample`` beside it."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_models.density_model import DensityModel

__all__ = ["export_saved_model"]


def export_saved_model(model: DensityModel, path: str, verbose: bool = False, input_signature=None) -> None:
    """Writes a TensorFlow SavedModel with three endpoints.

    * ``serve``: the model's call, as Keras' ``model.export`` writes it: ``serve(x)``,
      or ``serve((x, y))`` for a conditional model, gives log p per row.
      ``keras.layers.TFSMLayer(path)`` reloads it as a layer (with
      ``dtype="float64"`` for a float64 model: the layer casts its inputs to its own
      dtype).
    * ``log_prob(x)`` (``log_prob(x, y)``): the same, with ``y`` a second argument.
    * ``sample(n, seed)`` (``sample(n, seed, y)``, ``y`` one row ``[K]``): ``[n, D]``
      samples, ``seed`` being two int32s.

    ``model.export(path)`` calls this. The SavedModel needs TensorFlow only: load it
    with ``tf.saved_model.load(path)`` in a process that never imports tfp_maf.

    Args:
      model: a `DensityModel`.
      path: the directory to write.
      verbose: print Keras' summary of the endpoints.
      input_signature: ``serve``'s, as Keras takes it (default: ``[x]`` or
        ``[(x, y)]`` with any number of rows, in the model's dtype).
    """
    D, K = model.event_size, model.conditional_dims
    dtype = tf.as_dtype(model.compute_dtype)
    x_spec = tf.TensorSpec([None, D], dtype, name="x")
    n_spec = tf.TensorSpec([], tf.int32, name="n")
    seed_spec = tf.TensorSpec([2], tf.int32, name="seed")
    archive = keras.export.ExportArchive()
    archive.track(model)
    if K is None:
        serve_signature = [x_spec]
        archive.add_endpoint("log_prob", lambda x: model.log_prob(x), [x_spec])
        archive.add_endpoint("sample", lambda n, seed: model.sample(n, seed=seed), [n_spec, seed_spec])
    else:
        y_spec = tf.TensorSpec([None, K], dtype, name="y")
        serve_signature = [(x_spec, y_spec)]
        archive.add_endpoint("log_prob", lambda x, y: model.log_prob(x, y), [x_spec, y_spec])
        archive.add_endpoint(
            "sample",
            lambda n, seed, y: model.sample(n, y=y, seed=seed),
            [n_spec, seed_spec, tf.TensorSpec([K], dtype, name="y")],
        )
    archive.add_endpoint("serve", lambda inputs: model(inputs, training=False), input_signature or serve_signature)
    archive.write_out(path, verbose=verbose)
