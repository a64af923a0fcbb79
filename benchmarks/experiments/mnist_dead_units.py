"""Why MADE misses the paper's MNIST row at the paper's step size: its relu units die.

Trains MADE and MADE MoG at the paper's MNIST size (1 x 1024 relu) on the real MNIST,
with Adam at the paper's step size (1e-3) and at 1e-4, and counts after 20, 100 and 500
steps (one epoch) the hidden units that are dead: never active on 5,000 training images.
The logit-space pixels are large (the background averages about -6.5): an Adam step
moves every weight of a unit by about the step size at once, so at 1e-3 a unit's
pre-activation jumps by units of the input scale and most units end below zero for every
image, where their gradient is zero for good.

    python benchmarks/experiments/mnist_dead_units.py [--data-dir DIR]

MNIST is read from ``--data-dir``, else ``$TFP_MAF_DATA``, else ``~/.tfp_maf/data``
(`keras_models.data`). Writes benchmarks/results/mnist_dead_units/<machine kind>.json and
.md (`_common.report`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common

from _common import DEAD_UNIT_STEPS, dead_unit_run, header, report, run_info  # noqa: E402

from keras_models import experiment  # noqa: E402

RATES = (1e-3, 1e-4)


def markdown(result) -> str:
    lines = [header(result, "Dead relu units of MADE and MADE MoG on MNIST "
                    "(`benchmarks/experiments/mnist_dead_units.py`)"),
             "| model | Adam step size | dead of 1,024 units after " + ", ".join(map(str, DEAD_UNIT_STEPS))
             + " steps | validation log-likelihood after 500 steps |", "|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['learning_rate']:g}{' (the paper)' if r['learning_rate'] == 1e-3 else ''} | "
              f"{', '.join(str(r['dead'][str(s)]) for s in DEAD_UNIT_STEPS)} | "
              f"{r['val_log_likelihood_after_500_steps']:.1f} |" for r in result["rows"]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="default: $TFP_MAF_DATA, else ~/.tfp_maf/data")
    args = parser.parse_args(argv)
    splits = experiment.load_splits("mnist", args.data_dir)
    rows = [dead_unit_run(splits, name, rate) for name in ("made", "made-mog") for rate in RATES]
    return report("mnist_dead_units", {**run_info(__file__, argv), "rows": rows}, markdown)


if __name__ == "__main__":
    main(sys.argv[1:])
