"""Scoring and sampling beyond TensorFlow: ONNX Runtime and LiteRT.

A density model leaves TensorFlow through the well-kept converters, from its SavedModel
(`keras_models.export.export_saved_model`, traced with `portable=True`: the ops both
converters take):

- ONNX: `export_onnx`, or ``model.export(path, format="onnx")``; one signature a file
  (``log_prob`` by default, or ``endpoint="sample_from_noise"``), for ONNX Runtime (C++,
  C#, Java, JavaScript, Python).
- LiteRT: `export_litert`, or ``model.export(path, format="litert")``; ``log_prob`` and
  ``sample_from_noise`` in one file, for the LiteRT interpreter (``ai_edge_litert``,
  Android, iOS).

``log_prob`` takes ``x [n, D]`` (and ``y [n, K]``) and gives ``log_prob [n]``;
``sample_from_noise`` takes standard normal ``noise [n, D]`` (and ``y``) that the client
draws, and gives ``samples [n, D]``: exact samples, the same as the SavedModel's for the
same noise; the mixtures (`MADEMoG`, `MAFMoG`) take standard Gumbel ``gumbel [n, D, C]``
too, which picks each variable's component. The input
checks of the SavedModel's signatures do not survive conversion: feed the widths the
model was built for.

The converters are the ``portable`` extra: ``pip install "tfp-maf[portable]"``
(tf2onnx, onnxruntime, ai-edge-litert). The conversion runs in the calling process and
changes nothing of TensorFlow's or NumPy's state.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import tensorflow as tf

from keras_models._optional import require
from keras_models.export import export_saved_model

__all__ = ["ENDPOINTS", "FILES", "export_files", "export_litert", "export_onnx", "export_portable"]

#: The signatures that leave TensorFlow.
ENDPOINTS = ("log_prob", "sample_from_noise")


@contextlib.contextmanager
def _portable_saved_model(model):
    """``model``'s SavedModel traced for the converters, loaded; deleted on exit."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "saved_model")
        export_saved_model(model, path, portable=True)
        yield tf.saved_model.load(path)


#: The files `export_files` writes, by format and signature.
FILES = {"onnx": {"log_prob": "model.onnx", "sample_from_noise": "model.sample_from_noise.onnx"},
         "litert": {"log_prob, sample_from_noise": "model.tflite"}}


def export_files(model, directory: str, formats=("onnx", "litert")) -> dict:
    """Writes every signature in each format into ``directory`` (`FILES` names them),
    from one SavedModel: what `export_onnx` and `export_litert` write, for the cost of
    one trace (``tfp-maf export --format`` calls this).

    Args:
      model: a `keras_models.DensityModel`.
      directory: where to write (created if missing).
      formats: ``"onnx"`` and/or ``"litert"``.

    Returns:
      ``{format: {signatures: path}}``.

    Raises:
      ValueError: for another format, or ``"litert"`` of a float64 model.
    """
    unknown = sorted(set(formats) - set(FILES))
    if unknown or not formats:
        raise ValueError(f"{model.name}: export_files(formats=...) takes some of {sorted(FILES)}, got {formats!r}.")
    if "litert" in formats:
        _check_litert(model)
    os.makedirs(directory, exist_ok=True)
    written = {}
    with _portable_saved_model(model) as loaded:
        for format in formats:
            written[format] = {}
            for endpoints, name in FILES[format].items():
                path = os.path.join(directory, name)
                if format == "onnx":
                    _write_onnx(loaded, endpoints, path)
                else:
                    _write_litert(loaded, path)
                written[format][endpoints] = path
    return written


def export_portable(model, path: str, format: str, input_signature, kwargs: dict) -> str:
    """``model.export(path, format=format, input_signature=..., **kwargs)`` for
    ``format`` ``"onnx"`` (`export_onnx`) or ``"litert"`` (`export_litert`); what the
    format does not take is refused."""
    if input_signature is not None:
        raise ValueError(f"{model.name}: export(format={format!r}) writes log_prob and "
                         "sample_from_noise, whose inputs are fixed; it takes no input_signature.")
    if format == "onnx":
        return export_onnx(model, path, **kwargs)
    if kwargs:
        raise TypeError(f"{model.name}: export(format='litert') takes no {sorted(kwargs)}.")
    return export_litert(model, path)


def export_onnx(model, path: str, endpoint: str = "log_prob", opset: int | None = None) -> str:
    """Writes one signature of ``model`` as an ONNX model, through tf2onnx.

    Args:
      model: a `keras_models.DensityModel` in float32 or float64.
      path: the ``.onnx`` file to write.
      endpoint: ``"log_prob"`` or ``"sample_from_noise"``.
      opset: the ONNX opset, or None for tf2onnx's default.

    Returns:
      ``path``.

    Raises:
      ValueError: for another endpoint.
      ImportError: if the ``portable`` extra is not installed.

    Example (inputs and outputs are named as in the SavedModel):

    >>> import os, tempfile, numpy as np, onnxruntime
    >>> from keras_models import MAF
    >>> model = MAF(2, hidden_units=[8], num_layers=2)
    >>> path = export_onnx(model, os.path.join(tempfile.mkdtemp(), "maf.onnx"))
    >>> session = onnxruntime.InferenceSession(path)
    >>> x = np.zeros((3, 2), np.float32)
    >>> (log_p,) = session.run(["log_prob"], {"x": x})
    >>> bool(np.allclose(log_p, model.log_prob(x), atol=1e-5))
    True
    """
    if endpoint not in ENDPOINTS:
        raise ValueError(f"{model.name}: export_onnx(endpoint=...) takes one of {list(ENDPOINTS)}, "
                         f"got {endpoint!r}.")
    with _portable_saved_model(model) as loaded:
        _write_onnx(loaded, endpoint, path, opset)
    return path


def _write_onnx(loaded, endpoint: str, path: str, opset: int | None = None) -> None:
    tf2onnx = require("tf2onnx.convert", "ONNX export", extra="portable")
    function = _signature_function(loaded, endpoint)
    tf2onnx.from_function(function, function.input_signature, opset=opset, output_path=path)


def _signature_function(loaded, name: str):
    """The SavedModel's signature ``name`` as a `tf.function` of positional inputs,
    named ``name`` (LiteRT's converter names a signature after its function)."""
    signature = loaded.signatures[name]
    inputs = signature.structured_input_signature[1]  # {input name: TensorSpec}

    def function(*args):
        return signature(**dict(zip(inputs, args, strict=True)))

    function.__name__ = name
    return tf.function(function, input_signature=list(inputs.values()))


def export_litert(model, path: str) -> str:
    """Writes ``model``'s ``log_prob`` and ``sample_from_noise`` signatures as one
    LiteRT (TensorFlow Lite) flatbuffer, through TensorFlow's LiteRT converter, with
    LiteRT's builtin ops only.

    Args:
      model: a `keras_models.DensityModel` in float32.
      path: the ``.tflite`` file to write.

    Returns:
      ``path``.

    Raises:
      ValueError: for a float64 model.

    Example:

    >>> import os, tempfile, numpy as np
    >>> from ai_edge_litert.interpreter import Interpreter
    >>> from keras_models import MAF
    >>> model = MAF(2, hidden_units=[8], num_layers=2)
    >>> path = export_litert(model, os.path.join(tempfile.mkdtemp(), "maf.tflite"))
    >>> runner = Interpreter(model_path=path).get_signature_runner("log_prob")
    >>> x = np.zeros((3, 2), np.float32)
    >>> bool(np.allclose(runner(x=x)["log_prob"], model.log_prob(x), atol=1e-5))
    True
    """
    _check_litert(model)
    with _portable_saved_model(model) as loaded:
        _write_litert(loaded, path)
    return path


def _check_litert(model) -> None:
    if model.compute_dtype != "float32":
        raise ValueError(f"{model.name}: LiteRT runs float32 models; this one is {model.compute_dtype}.")


def _write_litert(loaded, path: str) -> None:
    # From the signatures' functions: from_saved_model with two signature keys writes one
    # of them, as serving_default (TensorFlow 2.21).
    functions = [_signature_function(loaded, name).get_concrete_function() for name in ENDPOINTS]
    flatbuffer = tf.lite.TFLiteConverter.from_concrete_functions(functions, loaded).convert()
    with open(path, "wb") as f:
        f.write(flatbuffer)
