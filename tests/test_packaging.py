"""The release's metadata: one version, read by the command line without TensorFlow."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_has_one_source():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.M)
    assert 'version = {attr = "tfp_maf.__version__"}' in pyproject
    assert not re.search(r'^version = "', pyproject, re.M)
    init = (ROOT / "tfp_maf" / "__init__.py").read_text()
    assert len(re.findall(r'^__version__ = "\d+\.\d+\.\d+"$', init, re.M)) == 1


def test_cli_version_is_the_installed_one_and_needs_no_tensorflow():
    code = ("import sys, tfp_maf_cli\n"
            "try:\n    tfp_maf_cli.main(['--version'])\nexcept SystemExit:\n    pass\n"
            "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"tfp-maf {metadata.version('tfp-maf')}"
