"""Per-dataset architecture options of the paper (appendix C, Table of model sizes).

For each dataset the paper gave every model the same options of L hidden layers of H
units and kept the one that did best on validation data; hidden units are relu except on
GAS (tanh; Real NVP's scale nets are always tanh). CIFAR-10 has fewer hidden units than
inputs, so its hidden degrees are drawn at random.

Example:

>>> model_kwargs("gas")
{'hidden_units': [100], 'activation': 'tanh', 'hidden_degrees': 'sequential'}
>>> HIDDEN_UNIT_OPTIONS["bsds300"]
([512], [512, 512], [1024], [1024, 1024])

Protocols: ``"paper"`` follows the paper's text and table of options;
``"published"`` follows the authors' published code where the paper is silent: its
initialisation (`keras_models.initialization`), its hidden sizes where they differ
from the table (MNIST: two layers of 1,024 for every model), its wiring of the side
information (into each MADE's first hidden layer only) and its MADE heads, which output
log-precisions (``scale_parameterization="log_precision"``). ``"published-log-scale"`` is
``"published"`` with this library's log-scale heads: the one difference, isolated.

>>> model_kwargs("mnist", protocol="published")["hidden_units"]
[1024, 1024]
>>> model_kwargs("mnist", protocol="published")["scale_parameterization"]
'log_precision'
"""

from __future__ import annotations

__all__ = ["HIDDEN_UNIT_OPTIONS", "LEARNING_RATES", "PROTOCOLS", "PROTOCOL_LABELS", "PUBLISHED_HIDDEN_UNIT_OPTIONS",
           "hidden_unit_options", "model_kwargs"]

# The paper's step sizes (section 4): 1e-3 for MADE and MADE MoG, 1e-4 for the flows.
LEARNING_RATES = {"made": 1e-3, "made-mog": 1e-3}

HIDDEN_UNIT_OPTIONS = {
    # The embedded default is not in the paper: two layers of 100 learn it well.
    "figure1": ([100, 100],),
    "power": ([100], [100, 100]),
    "gas": ([100], [100, 100]),
    "hepmass": ([512], [512, 512]),
    "miniboone": ([512], [512, 512]),
    "bsds300": ([512], [512, 512], [1024], [1024, 1024]),
    "mnist": ([1024],),
    "cifar10": ([1024], [1024, 1024], [2048, 2048]),
}

#: The published code's hidden sizes where they differ from the paper's table
#: (``run_experiments.py`` trains every MNIST model with 2 x 1,024).
PUBLISHED_HIDDEN_UNIT_OPTIONS = {"mnist": ([1024, 1024],)}

#: ``"paper"``: the paper's text and table; ``"published"``: the authors' code where the paper is
#: silent; ``"published-log-scale"``: that code's protocol with log-scale MADE heads.
PROTOCOLS = ("paper", "published", "published-log-scale")

#: How a results table names a protocol's rows.
PROTOCOL_LABELS = {
    "paper": "the paper's protocol",
    "published": "the published code's protocol",
    "published-log-scale": "the published code's protocol, log-scale heads",
}

_ACTIVATIONS = {"gas": "tanh"}
_RANDOM_DEGREES = {"cifar10"}


def hidden_unit_options(dataset: str, protocol: str = "paper") -> tuple:
    """The hidden-size options of ``dataset`` under ``protocol`` (`PROTOCOLS`).

    Raises:
      ValueError: for an unknown dataset or protocol.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}.")
    if dataset not in HIDDEN_UNIT_OPTIONS:
        raise ValueError(f"no preset for dataset {dataset!r}; expected one of {sorted(HIDDEN_UNIT_OPTIONS)}.")
    if protocol != "paper":
        return PUBLISHED_HIDDEN_UNIT_OPTIONS.get(dataset, HIDDEN_UNIT_OPTIONS[dataset])
    return HIDDEN_UNIT_OPTIONS[dataset]


def model_kwargs(dataset: str, option: int = 0, protocol: str = "paper", model: str | None = None) -> dict:
    """Constructor keywords of the zoo models for ``dataset``, with the ``option``-th
    hidden-size option (0: the first, smallest) of ``protocol``.

    Args:
      dataset: a name of `keras_models.data.load`.
      option: the index into `hidden_unit_options` of ``dataset``.
      protocol: one of `PROTOCOLS`.
      model: None, or a name of `keras_models.build`: then only the keywords that
        model takes (Real NVP's networks, say, have fixed activations and no MADE
        options; the Gaussian takes none of these).

    Returns:
      ``{"hidden_units": [...], "activation": ..., "hidden_degrees": ...}`` (and
      ``"initialization": "published"``, ``"conditional_input_layers": "first_layer"``
      under the published protocols, and ``"scale_parameterization": "log_precision"``
      under ``"published"``), to pass to a zoo model or `keras_models.build`.

    Raises:
      ValueError: for an unknown dataset, protocol or model, or an option out of range.

    Example:

    >>> model_kwargs("gas", model="realnvp5")
    {'hidden_units': [100]}
    """
    options = hidden_unit_options(dataset, protocol)
    if not 0 <= option < len(options):
        raise ValueError(f"{dataset} has hidden-size options 0..{len(options) - 1}, got {option}.")
    kwargs = {
        "hidden_units": list(options[option]),
        "activation": _ACTIVATIONS.get(dataset, "relu"),
        "hidden_degrees": "random" if dataset in _RANDOM_DEGREES else "sequential",
    }
    if protocol != "paper":
        kwargs.update(initialization="published", conditional_input_layers="first_layer")
    if protocol == "published":
        kwargs.update(scale_parameterization="log_precision")
    if model is not None:
        from keras_models.zoo import model_keywords  # the zoo reads this module's options

        takes = model_keywords(model)
        kwargs = {key: value for key, value in kwargs.items() if key in takes}
    return kwargs
