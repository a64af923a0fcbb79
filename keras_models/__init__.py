"""keras_models: the paper's models as Keras 3 models (fit, evaluate, save).

The names below load on first use (PEP 562), so that ``import keras_models.cli`` (the
``tfp-maf`` command) answers ``--help`` without importing TensorFlow.
"""

import importlib

_LAZY = {
    "MADE": "keras_models.zoo",
    "MAF": "keras_models.zoo",
    "Gaussian": "keras_models.zoo",
    "MADEMoG": "keras_models.zoo",
    "MAFMoG": "keras_models.zoo",
    "RealNVP": "keras_models.zoo",
    "build": "keras_models.zoo",
    "DensityModel": "keras_models.density_model",
    "evaluation": None,
    "training": None,
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'keras_models' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name] or f"keras_models.{name}")
    value = module if _LAZY[name] is None else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
