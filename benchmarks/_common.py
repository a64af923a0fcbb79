"""What every benchmark records beside its figures, and where it writes them."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

RESULTS = Path(__file__).resolve().parent / "results"


def run_info(script: str, argv) -> dict:
    """The machine, the library versions and the command that produced a result."""
    return {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, "
                   f"GPU: {bool(tf.config.list_physical_devices('GPU'))}",
        "tensorflow": tf.__version__,
        "tfp": tfp.__version__,
        "command": f"python benchmarks/{script} " + " ".join(argv or []),
    }


def host_cpu_times():
    """``(steal, total)`` clock ticks of all CPUs since boot, from Linux's /proc/stat, or
    None where there is none. On a virtual machine, steal is the time the host gave
    this machine's virtual CPUs to other guests: the noise of a shared machine, which
    a benchmark records beside the timings it hit."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(fields) < 8:
        return None
    return fields[7], sum(fields)  # user nice system idle iowait irq softirq steal


def steal_share(before, after):
    """The share of CPU time stolen by the host between two `host_cpu_times` readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def whole_executions(steps: int, per_call: int) -> int:
    """``steps`` rounded up to a multiple of ``per_call``, Keras' ``steps_per_execution``:
    Keras 3 runs whole executions, and the models refuse any other count."""
    return -(-steps // per_call) * per_call


def save(path, result: dict, markdown: str | None = None) -> None:
    """Writes ``result`` as JSON (and ``markdown`` beside it, as .md)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    if markdown is not None:
        path.with_suffix(".md").write_text(markdown)


def report(path, result: dict, markdown) -> dict:
    """Prints ``markdown(result)`` and saves both (`save`); returns ``result``."""
    text = markdown(result)
    print(text)
    save(path, result, text)
    return result


def fit_rounds(models: dict, ds, steps: int, rounds: int) -> dict:
    """``steps`` steps of `fit` on ``ds`` for each compiled model, interleaved round by
    round (a neighbour's load falls on all alike): medians and minima in ms per step,
    and the host's steal, per key of ``models``."""
    times, steals = {k: [] for k in models}, {k: [] for k in models}
    for _ in range(rounds):
        for k, model in models.items():
            before, start = host_cpu_times(), time.perf_counter()
            model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0)
            times[k].append(time.perf_counter() - start)
            steals[k].append(steal_share(before, host_cpu_times()))
    return {
        k: {
            "ms_per_step": 1000 * float(np.median(times[k])) / steps,
            "min_ms_per_step": 1000 * min(times[k]) / steps,
            "host_steal": float(np.median([s or 0.0 for s in steals[k]])),
        }
        for k in models
    }
