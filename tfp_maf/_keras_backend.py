"""The one Keras backend tfp-maf runs on: TensorFlow's.

Keras 3 picks its backend when it is first imported, from ``KERAS_BACKEND`` or, without
it, from ``~/.keras/keras.json``. tfp-maf's layers are Keras layers whose weights TFP's
bijectors read as TensorFlow tensors, so under JAX or PyTorch a layer builds, then fails
deep inside a call or a ``fit``. Importing `tfp_maf` imports this module first, which
checks the backend at once instead and says what to change.

>>> check_keras_backend("tensorflow")
>>> check_keras_backend("jax")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ImportError: tfp-maf runs on Keras' TensorFlow backend, and Keras is set to 'jax' ...
"""

from __future__ import annotations

__all__ = ["check_keras_backend"]


def check_keras_backend(backend: str | None = None) -> None:
    """Raises ImportError unless ``backend`` (None: the one Keras runs on here) is
    ``"tensorflow"``."""
    if backend is None:
        import keras

        backend = keras.config.backend()
    if backend != "tensorflow":
        raise ImportError(
            f"tfp-maf runs on Keras' TensorFlow backend, and Keras is set to {backend!r} "
            "(by the environment variable KERAS_BACKEND or, without it, ~/.keras/keras.json). "
            "Set KERAS_BACKEND=tensorflow before Keras is first imported: in the shell, or in "
            "Python with os.environ['KERAS_BACKEND'] = 'tensorflow' ahead of any import of keras."
        )


check_keras_backend()
