"""Checks of constructor arguments, shared by tfp_maf's layers and bijectors and by
keras_models' models.

Each returns the value in its plain Python type or raises an error that names the
argument, what it takes and what came: where ``int()`` would truncate ``2.5`` to 2,
``[int(h) for h in "128"]`` make three hidden layers, ``bool("no")`` read as True, and a
log-scale bound of 0 give NaN at the first step.

Example:

>>> check_int(3, "num_layers"), check_ints((64, 64), "hidden_units"), check_bound(None, "log_scale_bound")
(3, [64, 64], None)
>>> check_int(2.5, "num_layers")
Traceback (most recent call last):
  ...
TypeError: num_layers must be an integer >= 1, got 2.5.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["check_bool", "check_bound", "check_int", "check_ints"]


def _or_none(optional: bool) -> str:
    return " or None" if optional else ""


def check_int(value, name: str, minimum: int = 1, optional: bool = False) -> int | None:
    """``value``, a Python or NumPy integer of at least ``minimum``, as an int (None
    stays None where ``optional``).

    Raises:
      TypeError: for a float (whole or not), a bool or a string.
      ValueError: below ``minimum``.
    """
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}{_or_none(optional)}, got {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}{_or_none(optional)}, got {value}.")
    return int(value)


def check_ints(values, name: str, minimum: int = 1) -> list[int]:
    """``values``, a sequence of integers each at least ``minimum`` (``hidden_units``), as
    a list of ints.

    Raises:
      TypeError: for a string, a single number, or an element that is not an integer.
      ValueError: for an element below ``minimum``.
    """
    if isinstance(values, (str, bytes, numbers.Number)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a list of integers >= {minimum}, got {values!r}.")
    return [check_int(v, f"each of {name}", minimum) for v in values]


def check_bound(value, name: str, optional: bool = True, zero: bool = False) -> float | None:
    """``value``, a finite number above 0 (or 0 too, where ``zero``; None stays None where
    ``optional``), as a float.

    Raises:
      TypeError: for what is not a real number.
      ValueError: for 0, a negative number, inf or NaN.
    """
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number {'>=' if zero else '>'} 0{_or_none(optional)}, got {value!r}.")
    if not (math.isfinite(value) and (value > 0 or (zero and value == 0))):
        raise ValueError(f"{name} must be finite and {'>=' if zero else '>'} 0{_or_none(optional)}, got {value}.")
    return float(value)


def check_bool(value, name: str) -> bool:
    """``value``, True or False (NumPy's too).

    Raises:
      TypeError: for anything else (a string such as ``"no"`` would read as True).
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}.")
    return bool(value)
