"""The ``paper`` extra's packages: a feature that needs one that is missing says how to
install it, and the core install does not need them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from keras_models import _optional

ROOT = Path(__file__).resolve().parents[1]
PAPER_MODULES = ("tensorflow_datasets", "importlib_resources", "pandas", "matplotlib")


def test_require_returns_the_module():
    assert _optional.require("json", "anything") is json


def test_a_missing_module_names_the_feature_and_the_install_command():
    with pytest.raises(ImportError) as caught:
        _optional.require("tfp_maf_no_such_module", "the frobnicator")
    assert isinstance(caught.value, _optional.MissingOptionalDependency)
    message = str(caught.value)
    assert message.startswith("the frobnicator needs the paper extra: ")
    assert 'pip install "tfp-maf[paper]"' in message
    assert "tfp_maf_no_such_module" in message
    assert caught.value.name == "tfp_maf_no_such_module"


def test_the_paper_extra_exists_and_the_core_does_not_need_it():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r"^paper = \[", pyproject, re.M)
    core = re.search(r"^dependencies = \[(.*?)^\]", pyproject, re.M | re.S).group(1)
    core = [line.strip() for line in core.splitlines() if line.strip().startswith('"')]
    for package in ("tensorflow-datasets", "importlib_resources", "pandas", "matplotlib"):
        assert not any(dep.startswith(f'"{package}') for dep in core), (package, core)


#: What each feature of the paper extra says when its package is missing.
FEATURES = {
    "gas": ("from keras_models.data import load_gas as call", "the GAS loader"),
    "hepmass": ("from keras_models.data import load_hepmass as call", "the HEPMASS loader"),
    "figures": ("from keras_models.figures import _pyplot as call", "keras_models.figures"),
    "tfds": ("from keras_models.data import load_mnist\n"
             "call = lambda: load_mnist(source='tfds')", "the tfds source of mnist"),
    "tfds_builders": ("call = lambda: __import__('keras_models.data.tfds_builders')",
                      "keras_models.data.tfds_builders"),
    "cli": ("import tfp_maf_cli\n"
            "call = lambda: tfp_maf_cli.main(['reproduce', '--models', 'maf5', '--results', 'r'])",
            "tfp-maf: tfp-maf reproduce"),
}


def test_features_of_the_paper_extra_say_so_when_it_is_missing(tmp_path):
    # One child process where the extra's packages cannot be imported, as on a core install.
    blocks = "\n".join(
        f"{setup}\ntry:\n    call()\nexcept (SystemExit, ImportError) as err:\n"
        f"    print(json.dumps([{name!r}, str(err)]))"
        for name, (setup, _) in FEATURES.items()
    )
    code = f"import json, sys\nfor name in {PAPER_MODULES!r}:\n    sys.modules[name] = None\n{blocks}\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300)
    assert done.returncode == 0, done.stderr
    said = dict(json.loads(line) for line in done.stdout.splitlines() if line.startswith("["))
    assert sorted(said) == sorted(FEATURES), done.stdout
    for name, (_, start) in FEATURES.items():
        assert said[name].startswith(start), said[name]
        assert 'needs the paper extra: pip install "tfp-maf[paper]"' in said[name], said[name]
    assert not (tmp_path / "r").exists()  # reproduce stopped before training anything
