"""``tf.data`` pipelines over in-memory splits that keep up with training.

The training pipeline shuffles row *indices* (a fresh permutation every epoch) and gathers
one whole batch per step, instead of slicing and re-batching single rows: one gather per
batch costs microseconds, so the pipeline is never what limits a training step
(``benchmarks/pipeline.py`` measures both).

The batches are gathered from the caller's arrays themselves, in NumPy: a pipeline holds
no copy of the data (a tensor made from an array would be one, since TensorFlow copies
every array that is not aligned to its 64 bytes, as NumPy's large arrays are not), and a
memory-mapped array (``np.load(..., mmap_mode="r")``) trains without being read whole.
"""

from __future__ import annotations

import typing
import weakref

import numpy as np
import tensorflow as tf

__all__ = ["Pipelines", "array_dataset", "make_pipelines"]

# The shuffle counters that an `array_dataset` advances itself, pass by pass: by id,
# each entry gone with its variable (TensorFlow's variables are not hashable).
_SELF_COUNTING = weakref.WeakValueDictionary()


def counts_its_passes(counter) -> bool:
    """Whether ``counter`` is the shuffle counter of an `array_dataset`, which the
    pipeline advances itself at each pass: one iterator of the repeated pipeline then
    reads the same passes as a fresh iterator each epoch with the counter set to the
    epoch (`keras_models.training.fit_as_paper` relies on it; not public API).

    Args:
      counter: an int64 `tf.Variable`, or anything else (False).

    Returns:
      A bool.
    """
    return _SELF_COUNTING.get(id(counter)) is counter


class Pipelines(typing.NamedTuple):
    """The ``tf.data`` datasets of a dataset's three splits (`make_pipelines`).

    Each yields ``x`` batches, or ``(x, y)`` for a conditional model: what
    ``fit``, ``evaluate`` and `keras_models.training.fit_as_paper` take.

    Attributes:
      train: shuffled batches, a new order every epoch.
      validation: ordered batches of the validation split.
      test: ordered batches of the test split.
      epoch: the training pipeline's shuffle counter.
    """

    train: tf.data.Dataset
    validation: tf.data.Dataset
    test: tf.data.Dataset
    #: The training pipeline's epoch counter (see `array_dataset`); a resumed run
    #: sets it so that epoch ``e`` sees the same batches as in an uninterrupted run.
    epoch: tf.Variable | None = None


def array_dataset(x: np.ndarray, y: np.ndarray | None = None, batch_size: int = 100,
                  shuffle: bool = False, seed: int | None = None,
                  drop_remainder: bool = False, epoch: tf.Variable | None = None) -> tf.data.Dataset:
    """Batches of ``x`` (or ``(x, y)``) from arrays, shuffled anew each epoch if asked.

    A shuffled dataset draws the order of each pass from ``(seed, epoch)`` alone
    (a stateless shuffle), where ``epoch`` is an int64 `tf.Variable` that every pass
    reads and then increments. The order of epoch ``e`` is therefore the same in any
    process: a run resumed at epoch ``e`` sets ``epoch`` to ``e``
    (`keras_models.training.fit_as_paper` does) and sees exactly the batches an
    uninterrupted run would have seen.

    Args:
      x: the rows ``[N, D]``: an array, memory-mapped or not, or what `np.asarray`
        takes. Each pass reads it as it is then (no copy is taken).
      y: their side information ``[N, K]``, or None.
      batch_size: rows per batch.
      shuffle: draw a new order of the rows every pass.
      seed: the shuffle's seed (None: 0).
      drop_remainder: drop a last batch of fewer than ``batch_size`` rows.
      epoch: the shuffle counter to read and increment; None creates one.

    Returns:
      A `tf.data.Dataset` of ``x`` (or ``(x, y)``) batches, its cardinality known.

    Raises:
      ValueError: if ``x`` has no rows, or ``y`` not one row per row of ``x``.

    Example:

    >>> import numpy as np
    >>> ds = array_dataset(np.zeros((250, 3), np.float32), batch_size=100, shuffle=True, seed=0)
    >>> [b.shape[0] for b in ds]
    [100, 100, 50]
    """
    if len(x) == 0:
        raise ValueError(f"expected at least one row, got an empty array of shape {np.shape(x)}.")
    if y is not None and len(y) != len(x):
        raise ValueError(f"expected one label per row ({len(x)}), got {len(y)}.")
    arrays = (np.asarray(x),) if y is None else (np.asarray(x), np.asarray(y))
    n = len(x)
    if shuffle:
        if epoch is None:
            epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="shuffle_epoch")
        _SELF_COUNTING[id(epoch)] = epoch
        key = tf.constant(0 if seed is None else int(seed), tf.int64)

        @tf.autograph.experimental.do_not_convert  # no Python control flow on tensors
        def permutation(_):
            current = epoch.assign_add(1) - 1
            order = tf.random.experimental.stateless_shuffle(
                tf.range(n, dtype=tf.int64), seed=tf.stack([key, current])
            )
            return tf.data.Dataset.from_tensor_slices(order)

        indices = tf.data.Dataset.from_tensors(0).flat_map(permutation)
    else:
        indices = tf.data.Dataset.range(n)
    indices = indices.batch(batch_size, drop_remainder=drop_remainder)
    batches = n // batch_size if drop_remainder else -(-n // batch_size)
    indices = indices.apply(tf.data.experimental.assert_cardinality(batches))

    def take(idx):  # NumPy's gather: a batch-sized copy of the rows, nothing more
        return tuple(a[idx] for a in arrays)

    @tf.autograph.experimental.do_not_convert  # tf.data would convert it: 0.03 s a pipeline
    def gather(idx):
        batch = tf.numpy_function(take, [idx], [tf.as_dtype(a.dtype) for a in arrays], stateful=False)
        for t, a in zip(batch, arrays, strict=True):
            t.set_shape([None, *a.shape[1:]])
        return batch[0] if y is None else tuple(batch)

    # A batch is one gather from memory (microseconds): one producer thread and two
    # batches in flight keep any training step fed, with nothing to tune. tf.data's
    # autotuner is off: its background thread takes a core from the training step's
    # matmuls, which made whole epochs up to 1.5x slower on 2-core machines
    # (`benchmarks/pipeline.py`).
    options = tf.data.Options()
    options.autotune.enabled = False
    return indices.map(gather).prefetch(2).with_options(options)


def make_pipelines(splits, batch_size: int = 100, eval_batch_size: int = 10_000, seed: int = 0,
                   conditional: bool = False) -> Pipelines:
    """Shuffled training batches and ordered validation / test batches of ``splits``
    (a ``Splits``), yielding ``x``, or ``(x, y)`` when ``conditional``.

    A training set that leaves a last batch of one row leaves it out, a different row
    each epoch (the batches are shuffled): in training a batch norm normalises a batch by
    its own variance, which one row does not have (it is 0: the row's loss is off by tens
    of nats and its step is noise). Torch's batch norm refuses such a batch.

    Args:
      splits: a `keras_models.data.Splits`.
      batch_size: rows per training batch (100 in the paper).
      eval_batch_size: rows per validation and test batch.
      seed: the training shuffle's seed.
      conditional: yield ``(x, y)`` pairs, for a conditional model.

    Returns:
      `Pipelines`; its ``epoch`` is the training pipeline's shuffle counter.

    Raises:
      ValueError: if ``conditional`` and ``splits`` has no labels.

    Example:

    >>> import numpy as np
    >>> from keras_models.data import Splits
    >>> x, y = np.zeros((30, 2), np.float32), np.eye(3, dtype=np.float32)[np.arange(30) % 3]
    >>> pipes = make_pipelines(Splits("toy", x, x, x, y, y, y, num_classes=3), batch_size=10,
    ...                        conditional=True)
    >>> [t.shape for t in next(iter(pipes.train))]
    [TensorShape([10, 2]), TensorShape([10, 3])]
    """
    if conditional and splits.y_train is None:
        raise ValueError(f"{splits.name} has no labels: a conditional model needs labelled data.")
    y = (lambda s: getattr(splits, f"y_{s}")) if conditional else (lambda s: None)
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="shuffle_epoch")
    return Pipelines(
        array_dataset(splits.x_train, y("train"), batch_size, shuffle=True, seed=seed, epoch=epoch,
                      drop_remainder=len(splits.x_train) % batch_size == 1),
        array_dataset(splits.x_val, y("val"), eval_batch_size),
        array_dataset(splits.x_test, y("test"), eval_batch_size),
        epoch,
    )
