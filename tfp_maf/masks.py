"""MADE connectivity: input orders, hidden degrees and the masks they imply.

Pure NumPy, no TensorFlow: everything here is decided once, when a layer is
built, and is then a constant of the network.

Degrees follow Germain et al. (2015) and section 4 of Papamakarios et al.
(2017). Input ``i`` gets degree ``d(i)``, its 1-based position in the chosen
order. A hidden unit of degree ``k`` may see inputs of degree ``<= k``, and
output ``i`` (the parameters of the conditional of ``x_i``) may see hidden
units of degree ``< d(i)``. Output ``i`` then depends only on the variables
before ``i`` in the order: the autoregressive property.

Example:

>>> import numpy as np
>>> from tfp_maf import masks
>>> deg_in = masks.input_degrees(3, "left-to-right")
>>> deg_h = masks.hidden_degrees(4, 3)
>>> m = masks.made_masks(deg_in, [deg_h])
>>> total = (m[0] @ m[1]) > 0          # input j reaches output i?
>>> bool(np.all(total == np.triu(np.ones((3, 3)), k=1).astype(bool)))
True

References:
  [1] Germain, Gregor, Murray, Larochelle. MADE: Masked Autoencoder for
      Distribution Estimation. ICML 2015. https://arxiv.org/abs/1502.03509
  [2] Papamakarios, Pavlakou, Murray. Masked Autoregressive Flow for Density
      Estimation. NeurIPS 2017. https://arxiv.org/abs/1705.07057
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "ORDERS",
    "check_order",
    "hidden_degrees",
    "input_degrees",
    "made_masks",
    "order_permutation",
]

ORDERS = ("left-to-right", "right-to-left", "random")


def order_permutation(
    num_inputs: int, order: str | Sequence[int] = "left-to-right", seed: int | None = None
) -> np.ndarray:
    """Returns the order as a permutation: ``perm[k]`` is the k-th variable.

    Example:

    >>> order_permutation(4, "right-to-left").tolist()
    [3, 2, 1, 0]

    Args:
      num_inputs: the number of variables ``D``.
      order: ``"left-to-right"`` (the data's order), ``"right-to-left"``
        (reversed), ``"random"`` (a permutation drawn with ``seed``), or an
        explicit permutation of ``range(D)``.
      seed: the seed for ``"random"``; ignored otherwise.

    Returns:
      An int array of shape ``[D]``.

    Raises:
      ValueError: for ``num_inputs < 1``, an unknown order name or a list that
        is not a permutation of ``range(D)``.
    """
    if num_inputs < 1:
        raise ValueError(f"num_inputs must be >= 1, got {num_inputs}.")
    if isinstance(order, str):
        if order == "left-to-right":
            return np.arange(num_inputs)
        if order == "right-to-left":
            return np.arange(num_inputs)[::-1].copy()
        if order == "random":
            return np.random.RandomState(seed).permutation(num_inputs)
        raise ValueError(f"order must be one of {ORDERS} or a permutation; got {order!r}.")
    return check_order(order, num_inputs)


def check_order(order: Sequence[int], num_inputs: int) -> np.ndarray:
    """Validates an explicit permutation of ``range(num_inputs)``.

    Args:
      order: a sequence of ints.
      num_inputs: ``D``.

    Returns:
      ``order`` as an int64 array of shape ``[D]``.

    Raises:
      ValueError: if ``order`` is not a permutation of ``range(num_inputs)``.

    Example:

    >>> check_order([2, 0, 1], 3).tolist()
    [2, 0, 1]
    """
    perm = np.asarray(order)
    if perm.shape != (num_inputs,) or not np.array_equal(np.sort(perm), np.arange(num_inputs)):
        raise ValueError(
            f"order must be a permutation of range({num_inputs}); got {list(np.ravel(order))}."
        )
    return perm.astype(np.int64)


def input_degrees(
    num_inputs: int, order: str | Sequence[int] = "left-to-right", seed: int | None = None
) -> np.ndarray:
    """Degree of each input: its 1-based position in the order, shape ``[D]``.

    Args:
      num_inputs: ``D``.
      order: as in `order_permutation`.
      seed: the seed of a ``"random"`` order.

    Returns:
      An int64 array ``[D]``: ``degrees[i]`` is the position of variable ``i``.

    Raises:
      ValueError: as `order_permutation`.

    Example:

    >>> input_degrees(3, [2, 0, 1]).tolist()  # variable 2 first, then 0, then 1
    [2, 3, 1]
    """
    perm = order_permutation(num_inputs, order, seed)
    degrees = np.empty(num_inputs, dtype=np.int64)
    degrees[perm] = np.arange(1, num_inputs + 1)
    return degrees


def hidden_degrees(
    num_units: int,
    num_inputs: int,
    method: str = "sequential",
    previous_degrees: np.ndarray | None = None,
    seed: int | None = None,
) -> np.ndarray:
    """Degrees of one hidden layer, each in ``[1, max(D - 1, 1)]``.

    ``"sequential"`` cycles 1, 2, ..., D-1, 1, 2, ... as the paper does: every
    degree is present as soon as ``num_units >= D - 1``, so MADE introduces no
    conditional independence. ``"random"`` draws each degree uniformly from
    ``[min(previous_degrees), D - 1]`` as Germain et al. do (the paper's
    CIFAR-10 setting, where ``H < D``).

    Args:
      num_units: the layer's width ``H``, at least 1.
      num_inputs: ``D``.
      method: ``"sequential"`` or ``"random"``.
      previous_degrees: the degrees of the layer below (the inputs' for the
        first hidden layer); ``"random"`` draws at or above their minimum.
      seed: the seed of ``"random"``.

    Returns:
      An int64 array ``[num_units]``.

    Raises:
      ValueError: for ``num_units < 1`` or an unknown ``method``.

    Example:

    >>> hidden_degrees(5, 3).tolist()
    [1, 2, 1, 2, 1]
    """
    if num_units < 1:
        raise ValueError(f"hidden layers need at least one unit, got {num_units}.")
    top = max(num_inputs - 1, 1)
    if method == "sequential":
        return (np.arange(num_units) % top + 1).astype(np.int64)
    if method == "random":
        low = 1 if previous_degrees is None else int(min(np.min(previous_degrees), top))
        return np.random.RandomState(seed).randint(low, top + 1, size=num_units).astype(np.int64)
    raise ValueError(f"hidden degree method must be 'sequential' or 'random', got {method!r}.")


def made_masks(
    input_degrees: np.ndarray, hidden_degrees: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """Binary masks of a MADE, one per weight matrix, ``[fan_in, fan_out]``.

    Hidden layer masks allow ``d_in <= d_out``; the output mask allows
    ``d_hidden < d(i)`` so that output ``i`` never sees ``x_i`` or later
    variables. With no hidden layer the single mask is strictly triangular in
    the order. The output mask has one column per variable; a head with several
    parameters per variable repeats it (see `tfp_maf.layers.MADENetwork`).

    Args:
      input_degrees: ``[D]``, from `input_degrees`.
      hidden_degrees: one array of degrees per hidden layer, from
        `hidden_degrees`; empty for a MADE without hidden layers.

    Returns:
      ``len(hidden_degrees) + 1`` float32 arrays of zeros and ones: the hidden
      layers' masks, then the output mask ``[H_L, D]``.

    Example:

    >>> [m.astype(int).tolist() for m in made_masks(np.array([1, 2, 3]), [])]
    [[[0, 1, 1], [0, 0, 1], [0, 0, 0]]]
    """
    masks = []
    prev = np.asarray(input_degrees)
    for degrees in hidden_degrees:
        masks.append((prev[:, None] <= degrees[None, :]).astype(np.float32))
        prev = degrees
    masks.append((prev[:, None] < np.asarray(input_degrees)[None, :]).astype(np.float32))
    return masks
