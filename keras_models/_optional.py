"""The ``paper`` extra's packages, imported only by the features that need them.

The core install (``pip install tfp-maf``) builds, trains, saves, loads and exports the
models, and runs ``tfp-maf train`` on the embedded Figure 1 density. The GAS and HEPMASS
loaders (pandas), the tfds sources and builders (tensorflow-datasets) and the figures
(matplotlib) need ``pip install "tfp-maf[paper]"``; `require` imports their packages and,
where one is missing, says so.
"""

from __future__ import annotations

import importlib
import types

__all__ = ["INSTALL", "MissingOptionalDependency", "require"]

#: The install command quoted in the errors.
INSTALL = 'pip install "tfp-maf[paper]"'


class MissingOptionalDependency(ImportError):
    """A feature's package (from the ``paper`` extra) is not installed; the message names
    the feature and the install command."""


def require(module_name: str, feature: str, extra: str = "paper") -> types.ModuleType:
    """Imports ``module_name`` for ``feature``, or raises `MissingOptionalDependency`
    naming the extra that installs it (``"paper"``; ``"portable"``: the converters;
    ``"sbi"``: scikit-learn and matplotlib for `keras_models.sbi`).

    >>> require("math", "arithmetic").sqrt(4.0)
    2.0
    >>> try:
    ...     require("no_such_module_xyz", "the frobnicator")
    ... except ImportError as err:
    ...     print(err)
    the frobnicator needs the paper extra: pip install "tfp-maf[paper]" (no module named 'no_such_module_xyz')
    >>> try:
    ...     require("no_such_module_xyz", "keras_models.sbi.c2st", extra="sbi")
    ... except ImportError as err:
    ...     print(err)
    keras_models.sbi.c2st needs the sbi extra: pip install "tfp-maf[sbi]" (no module named 'no_such_module_xyz')
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        # err.name is the module that is missing: module_name, or one of its own imports
        # (tensorflow-datasets imports importlib_resources without declaring it).
        install = f'pip install "tfp-maf[{extra}]"'
        raise MissingOptionalDependency(
            f"{feature} needs the {extra} extra: {install} (no module named {err.name or module_name!r})",
            name=module_name,
        ) from err
