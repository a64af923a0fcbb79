"""sbibm's shipped files, read without importing sbibm.

sbibm ships, for each task and each of its 10 observations ``k``, the files

    sbibm/tasks/<task>/files/num_observation_<k>/observation.csv
    sbibm/tasks/<task>/files/num_observation_<k>/true_parameters.csv
    sbibm/tasks/<task>/files/num_observation_<k>/reference_posterior_samples.csv.bz2

(CSV with one header line; 10,000 reference posterior samples). Importing sbibm needs
torch, pyro and more (a Julia stack for some tasks), none of which these files need:
install the package without its dependencies, ``pip install --no-deps sbibm==1.1.0``,
and this module finds its directory with `importlib.util.find_spec`, which locates a
top-level package without running it.

Example:

>>> from importlib.util import find_spec
>>> import numpy as np
>>> from keras_models.sbi import reference
>>> if find_spec("sbibm") is not None:
...     samples = reference.posterior_samples("two_moons", 1)
...     x_o = reference.observation("two_moons", 1)
... else:  # the shapes sbibm's files have
...     samples, x_o = np.zeros((10000, 2)), np.zeros(2)
>>> samples.shape, x_o.shape
((10000, 2), (2,))
"""

from __future__ import annotations

import bz2
import importlib.util
from pathlib import Path

import numpy as np

from keras_models.sbi import tasks

__all__ = [
    "INSTALL",
    "NUM_OBSERVATIONS",
    "MissingReferenceFiles",
    "files_dir",
    "observation",
    "posterior_samples",
    "true_parameters",
]

#: The command that installs sbibm's files (and none of its dependencies).
INSTALL = "pip install --no-deps sbibm==1.1.0"

#: sbibm's observations are numbered 1 to 10.
NUM_OBSERVATIONS = 10


class MissingReferenceFiles(ImportError):
    """sbibm (whose files this module reads) is not installed, or lacks the file asked
    for; the message names the install command."""


def _task(task):
    # A name or a task object; the name must be one whose constants we share with sbibm.
    return tasks.get(task) if isinstance(task, str) else tasks.get(task.name)


def files_dir(task, num_observation: int) -> Path:
    """The folder of observation ``num_observation`` of ``task`` in the installed sbibm.

    Args:
      task: a task's name (`keras_models.sbi.tasks.NAMES`) or a task object.
      num_observation: 1 to 10.

    Raises:
      MissingReferenceFiles: if sbibm is not installed.
      ValueError: if ``num_observation`` is not 1 to 10.
    """
    task = _task(task)
    if not 1 <= int(num_observation) <= NUM_OBSERVATIONS:
        raise ValueError(f"num_observation must be 1 to {NUM_OBSERVATIONS}; got {num_observation}.")
    spec = importlib.util.find_spec("sbibm")
    if spec is None or not spec.submodule_search_locations:
        raise MissingReferenceFiles(
            f"sbibm's reference files for {task.name!r} need the sbibm package: {INSTALL} "
            "(--no-deps: only its files are read, not its torch code).",
            name="sbibm",
        )
    root = Path(next(iter(spec.submodule_search_locations)))
    return root / "tasks" / task.name / "files" / f"num_observation_{int(num_observation)}"


def _read_csv(path: Path) -> np.ndarray:
    if not path.exists():
        raise MissingReferenceFiles(f"{path} is missing; reinstall sbibm: {INSTALL}", name="sbibm")
    opener = bz2.open if path.suffix == ".bz2" else open
    with opener(path, "rt") as f:
        # One header line (parameter_1, ... or data_1, ...), then rows of floats.
        return np.loadtxt(f, delimiter=",", skiprows=1, ndmin=2, dtype=np.float64)


def _row(task, num_observation: int, file: str, width: int) -> np.ndarray:
    values = _read_csv(files_dir(task, num_observation) / file)
    if values.shape != (1, width):
        raise ValueError(f"{file} of {task.name!r} holds shape {values.shape}, not (1, {width}).")
    return values[0]


def observation(task, num_observation: int) -> np.ndarray:
    """sbibm's observation ``x_o`` number ``num_observation`` of ``task``: ``[x_dim]``."""
    task = _task(task)
    return _row(task, num_observation, "observation.csv", task.x_dim)


def true_parameters(task, num_observation: int) -> np.ndarray:
    """The theta that sbibm simulated observation ``num_observation`` from: ``[theta_dim]``."""
    task = _task(task)
    return _row(task, num_observation, "true_parameters.csv", task.theta_dim)


def posterior_samples(task, num_observation: int) -> np.ndarray:
    """sbibm's reference posterior samples given observation ``num_observation``:
    ``[10000, theta_dim]``, float64 (the file's float32 values)."""
    task = _task(task)
    samples = _read_csv(files_dir(task, num_observation) / "reference_posterior_samples.csv.bz2")
    if samples.shape[1] != task.theta_dim:
        raise ValueError(f"{task.name!r}'s reference samples have {samples.shape[1]} columns, not {task.theta_dim}.")
    return samples
