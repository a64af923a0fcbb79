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
"""

from __future__ import annotations

__all__ = ["HIDDEN_UNIT_OPTIONS", "model_kwargs"]

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

_ACTIVATIONS = {"gas": "tanh"}
_RANDOM_DEGREES = {"cifar10"}


def model_kwargs(dataset: str, option: int = 0) -> dict:
    """Constructor keywords of the zoo models for ``dataset``, with the ``option``-th
    hidden-size option of the paper (0: the first, smallest).

    Args:
      dataset: a name of `keras_models.data.load`.
      option: the index into ``HIDDEN_UNIT_OPTIONS[dataset]``.

    Returns:
      ``{"hidden_units": [...], "activation": ..., "hidden_degrees": ...}``, to
      pass to a zoo model or `keras_models.build`.

    Raises:
      ValueError: for an unknown dataset or an option out of range.
    """
    if dataset not in HIDDEN_UNIT_OPTIONS:
        raise ValueError(f"no preset for dataset {dataset!r}; expected one of {sorted(HIDDEN_UNIT_OPTIONS)}.")
    options = HIDDEN_UNIT_OPTIONS[dataset]
    if not 0 <= option < len(options):
        raise ValueError(f"{dataset} has hidden-size options 0..{len(options) - 1}, got {option}.")
    return {
        "hidden_units": list(options[option]),
        "activation": _ACTIVATIONS.get(dataset, "relu"),
        "hidden_degrees": "random" if dataset in _RANDOM_DEGREES else "sequential",
    }
