"""The paper's models as Keras 3 models.

| model | paper section | class |
|---|---|---|
| Gaussian (full covariance; class-conditional) | Tables 1, 2 baseline | `Gaussian` |
| MADE, Gaussian conditionals (Germain et al. 2015) | 2.1, 4 | `MADE` |
| MADE MoG, C = 10 | 4 | `MADEMoG` |
| Real NVP (5 / 10) (Dinh et al. 2017) | 3.3, 4 | `RealNVP` |
| MAF (5 / 10) | 3 | `MAF` |
| MAF MoG (5) | 4 | `MAFMoG` |
| NSF (5): autoregressive rational-quadratic splines (Durkan et al. 2019) | beyond the paper | `NSF` |

As in the paper: the first MAF layer uses the data's order and each next one
reverses it; a batch norm follows every autoregressive / coupling layer (so one sits
between every two layers and before the base); L2 penalty 1e-6 on every kernel. The
defaults suit small data.

Each model takes ``D`` first, then exactly the keywords that change it
(`keras_models.density_model.keywords` lists them) and refuses any other with a
TypeError that names it. The keywords several models share mean the same in each:

- ``hidden_units`` (every flow): sizes of the hidden layers of every network; default
  ``(64, 64)``. The paper chose per dataset among 1 or 2 layers of 100 (POWER, GAS), 512
  (HEPMASS, MINIBOONE, BSDS300) or 1024 units (MNIST, CIFAR-10):
  `keras_models.presets.model_kwargs`.
- ``conditional_dims`` (all): ``K_y``, the width of the side information ``y`` (10
  one-hot classes for conditional MNIST and CIFAR-10), or None.
- ``context_network`` (every flow): None, or a Keras layer mapping ``y`` ``[N, K_y]`` to
  an embedding ``[N, E]`` that every layer reads instead of ``y``, trained, saved and
  exported with the model (``docs/conditional.md``).
- ``l2`` (every flow): the L2 penalty on every kernel, ``1e-6`` as in the paper; 0 for
  none. Added to the gradient, not to the reported ``loss``.
- ``seed`` (every flow): seeds the orders, degrees and initial weights (layer ``i`` gets
  ``seed + i``): the same seed gives the same model, in any process.
- ``num_layers`` (MAF, MAF MoG, NSF, Real NVP): ``K``, the flow's layers (5 or 10 in the
  paper).
- ``batch_norm`` (MAF, MAF MoG, NSF): whether a batch norm follows each layer (the
  paper: yes).
- ``standardize`` (every flow): True (default): the flow learns on standardised columns
  of ``x`` (and ``y``), with each column's mean and standard deviation taken by the first
  ``fit`` (or ``model.adapt(x, y)``), and speaks the data's units: an exact affine part
  of the flow (`tfp_maf.Standardization`), saved and exported with it. False: the data
  as given (the paper's protocol, whose pipelines standardise).
- ``tails`` (every flow): ``T``, 20 by default: beyond ``+-T`` standardised units a
  column reaches the networks as the log of its distance (`tfp_maf.LogTails`; the
  identity within), so far rows score finite; None: none.
- ``dequantize`` (every flow): None, True or column indices: uniform noise on ``[0, 1)``
  added to those columns at each training step, for integer-valued columns (``fit``
  warns of them).
- ``log_scale_bound`` (MADE, MADE MoG, MAF, MAF MoG, Real NVP): ``B``, 8 by default:
  bounds every log-scale softly to ``+-B`` (`tfp_maf.math.soft_bound`; exactly the
  network's within ``+-B/2``), so that with the tails rows far from the data score
  finite and lower the farther they are; None: unbounded (the paper's protocol).
- ``num_components`` (MADE MoG, MAF MoG): ``C``, the Gaussians of each conditional (10
  in the paper).
- ``activation`` (the MADE options: MADE, MADE MoG, MAF, MAF MoG, NSF): the MADEs'
  hidden activation, ``"relu"`` (the paper's default) or ``"tanh"`` (its choice for
  GAS).
- ``hidden_degrees`` (the MADE options): ``"sequential"`` (the paper) or ``"random"``
  (its CIFAR-10 setting, fewer hidden units than variables).
- ``kernel_blocks``, ``kernel_blocks_device`` (the MADE options): the MADEs' kernel
  storage (`tfp_maf.MADENetwork`): ``"auto"`` stores large kernels in degree blocks on a
  CPU and dense on a GPU, 1 all dense; the same densities. Each MADE decides its storage
  once, when the model is built, and the config saves each layer's count, so a saved
  model loads with the storage it was saved with; weights files load into any storage,
  optimizer state included.
- ``initialization`` (the MADE options): ``"default"`` or ``"published"`` (the published
  code's; `keras_models.initialization`).
- ``conditional_input_layers`` (the MADE options): which hidden layers ``y`` feeds:
  ``"all_layers"`` (default) or ``"first_layer"`` (the published code's wiring).
- ``scale_parameterization`` (the MADE options but NSF's): the MADEs' scale outputs:
  ``"log_scale"`` (default) or ``"log_precision"`` (the published code's): the same
  densities, the log-scales moving half as far per Adam step.

and Keras' ``name``, ``dtype`` (``"float32"`` or ``"float64"``) and ``trainable``.
The `Gaussian` takes ``conditional_dims`` and Keras' keywords only. Files saved by
earlier releases, whose configs held keys a model did not use, load to the same model.

Every model is a `keras_models.DensityModel`: ``fit`` minimises the mean negative
log-likelihood, ``model(x)`` and ``log_prob(x)`` give log p(x) per row, ``sample(n)``
draws, ``distribution()`` is the TFP distribution, ``save`` / ``export`` write it. Train
them as the paper does with `keras_models.training`, or with plain ``compile`` / ``fit``.

Example:

>>> import numpy as np
>>> from keras_models import zoo
>>> model = zoo.build("maf5", 2, hidden_units=[8])  # the command line's names
>>> type(model).__name__, model.num_layers
('MAF', 5)
>>> len(model.mades), len(model.norms)  # a batch norm after each MADE
(5, 5)
"""

from __future__ import annotations

from keras_models.density_model import DensityModel, keywords
from keras_models.zoo.autoregressive import MADE, MAF, NSF, MADEMoG, MAFMoG
from keras_models.zoo.gaussian import Gaussian
from keras_models.zoo.real_nvp import RealNVP

__all__ = ["MADE", "MAF", "MODELS", "NSF", "Gaussian", "MADEMoG", "MAFMoG", "RealNVP", "build", "fitted_in_closed_form",
           "model_keywords"]

MODELS = {
    "gaussian": (Gaussian, {}),
    "made": (MADE, {}),
    "made-mog": (MADEMoG, {}),
    "realnvp5": (RealNVP, {"num_layers": 5}),
    "realnvp10": (RealNVP, {"num_layers": 10}),
    "maf5": (MAF, {"num_layers": 5}),
    "maf10": (MAF, {"num_layers": 10}),
    "maf-mog5": (MAFMoG, {"num_layers": 5}),
    "nsf5": (NSF, {"num_layers": 5}),
}


def build(name: str, event_size: int, **kwargs) -> DensityModel:
    """A zoo model by its command-line name (``maf5``, ``made-mog``, ...).

    | name | model |
    |---|---|
    | ``gaussian`` | `Gaussian` |
    | ``made`` | `MADE` |
    | ``made-mog`` | `MADEMoG` |
    | ``realnvp5``, ``realnvp10`` | `RealNVP` with 5 or 10 layers |
    | ``maf5``, ``maf10`` | `MAF` with 5 or 10 layers |
    | ``maf-mog5`` | `MAFMoG` with 5 layers |
    | ``nsf5`` | `NSF` with 5 layers |

    Args:
      name: one of the names above.
      event_size: ``D``, the number of variables.
      **kwargs: the model's keywords (`model_keywords` of the name); they override
        the name's preset (e.g. ``num_layers``).

    Returns:
      The model, not compiled (`keras_models.training.compile_as_paper` uses the
      same name for the paper's step size).

    Raises:
      ValueError: for an unknown name, or as the model's constructor.
      TypeError: for a keyword the model does not take.

    Example:

    >>> from keras_models import build
    >>> model = build("realnvp10", 4, hidden_units=[8])
    >>> type(model).__name__, model.num_layers, model.event_size
    ('RealNVP', 10, 4)
    >>> build("gaussian", 4, hidden_units=[8])
    Traceback (most recent call last):
    ...
    TypeError: Gaussian takes no keyword 'hidden_units': it takes conditional_dims, name, dtype, trainable.
    """
    cls, preset = _model_class(name)
    return cls(event_size, **{**preset, **kwargs})


def model_keywords(name: str) -> tuple[str, ...]:
    """The keywords `build` takes for the model ``name`` (`keras_models.density_model.keywords`).

    Example:

    >>> "activation" in model_keywords("maf5"), "activation" in model_keywords("realnvp5")
    (True, False)
    """
    return keywords(_model_class(name)[0])


def fitted_in_closed_form(name: str) -> bool:
    """Whether the model ``name`` is fitted in closed form (`Gaussian`): no step size,
    batches or epochs apply to it.

    >>> fitted_in_closed_form("gaussian"), fitted_in_closed_form("maf5")
    (True, False)
    """
    return issubclass(_model_class(name)[0], Gaussian)


def _model_class(name: str):
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}.")
    return MODELS[name]
