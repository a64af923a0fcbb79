"""Shape checks shared by layers, bijectors and distributions.

Every public entry point checks the static width of its inputs so that a wrong
``D`` or a wrong width of ``y`` fails at once with a message naming what was
expected and what came, rather than deep inside a matmul.
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["as_conditional_input", "check_conditional_input", "check_event_size"]


def as_conditional_input(conditional_input, dtype: tf.DType | None) -> tf.Tensor | None:
    """``y`` as a tensor of ``dtype`` (NumPy arrays, lists and tensors alike), or None.

    TFP hands call-time keywords to a bijector as the caller gave them, so a NumPy ``y``
    in ``bijector_kwargs`` arrives as it is.
    """
    if conditional_input is None:
        return None
    conditional_input = tf.convert_to_tensor(conditional_input)
    return conditional_input if dtype is None else tf.cast(conditional_input, dtype)


def check_event_size(x: tf.Tensor, event_size: int, owner: str) -> None:
    """Raises ValueError unless the last axis of ``x`` has ``event_size``."""
    if x.shape.rank == 0:
        raise ValueError(
            f"{owner}: expected inputs with a last axis of {event_size} variables, "
            "got a scalar."
        )
    width = x.shape[-1] if x.shape.rank is not None else None
    if width is not None and width != event_size:
        raise ValueError(
            f"{owner}: expected inputs with {event_size} variables in the last axis, "
            f"got shape {x.shape.as_list()} ({width} variables)."
        )


def check_conditional_input(
    conditional_input: tf.Tensor | None, conditional_dims: int | None, owner: str
) -> None:
    """Raises ValueError if ``y`` is missing, unexpected or of the wrong width."""
    if conditional_dims is None:
        if conditional_input is not None:
            raise ValueError(
                f"{owner} is unconditional (conditional_dims=None) but got a conditional_input "
                f"of shape {conditional_input.shape.as_list()}."
            )
        return
    if conditional_input is None:
        raise ValueError(
            f"{owner} is conditional on y of width {conditional_dims}: pass "
            "conditional_input=y."
        )
    if conditional_input.shape.rank == 0:
        raise ValueError(
            f"{owner}: expected conditional_input with last axis {conditional_dims}, got a scalar."
        )
    width = conditional_input.shape[-1] if conditional_input.shape.rank is not None else None
    if width is not None and width != conditional_dims:
        raise ValueError(
            f"{owner}: expected conditional_input with {conditional_dims} columns in the last "
            f"axis, got shape {conditional_input.shape.as_list()}."
        )
