"""What every benchmark records beside its figures, where it writes them, and the helpers
the scripts share.

Results go to ``benchmarks/results/<measure>/<machine kind>.json`` and ``.md``: the latest
run of each measurement on each kind of CPU (git keeps the earlier ones). The kind is
`machine_kind`, the CPU's vendor and family and its widest vector unit
(``amd-epyc-avx512``, ``intel-xeon-avx512-fp16``, ``intel-xeon-amx``): the CPU decides the
standing between the contenders, so figures from two kinds do not compare, while ratios
within one run do. Each result records the CPU, the float32 matmul rate measured in the
same run, the date and the command (`run_info`), and its Markdown opens with them
(`header`).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shlex
import sys
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

# ------------------------------------------------------------------- the machine

#: CPU flags from the widest vector unit down, and the name each gives the machine kind.
ISA_TIERS = (
    ("amx_tile", "amx"),
    ("avx512_fp16", "avx512-fp16"),
    ("avx512f", "avx512"),
    ("avx2", "avx2"),
    ("sve", "sve"),
    ("asimd", "neon"),
)


def _cpuinfo(key: str) -> str | None:
    """The first ``key`` line of Linux's /proc/cpuinfo, or None where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() == key:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """The CPU's model name, as the system reports it."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    """The CPU's feature flags (x86 ``flags``, Arm ``Features``), where the system lists them."""
    return set((_cpuinfo("flags") or _cpuinfo("Features") or "").split())


def machine_kind(model: str | None = None, flags: set[str] | None = None) -> str:
    """The kind of machine a result belongs to: the CPU's vendor and family and its widest
    vector unit, as a file name (``AMD EPYC 9B14`` with AVX-512: ``amd-epyc-avx512``)."""
    model = cpu_model() if model is None else model
    flags = cpu_flags() if flags is None else flags
    words = re.sub(r"\((R|TM)\)|\bCPU\b|\bProcessor\b|@.*", " ", model, flags=re.IGNORECASE).split()
    family = re.sub(r"[^a-z0-9]+", "-", " ".join(words[:2]).lower()).strip("-")
    family = family or re.sub(r"[^a-z0-9]+", "-", platform.machine().lower()).strip("-") or "unknown"
    isa = next((name for flag, name in ISA_TIERS if flag in flags), None)
    return f"{family}-{isa}" if isa else family


# --------------------------------------------------------------------- timing


def sync(out):
    """Waits for ``out`` (tensors, nested) to be computed."""
    tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, out)


def normal_data(D: int, n: int, seed: int = 0) -> tf.Tensor:
    """``n`` points of N(0, I) in ``D`` dimensions, the same for a given seed."""
    return tf.random.stateless_normal([n, D], seed=[seed, 1])


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


#: Every interleaved comparison runs at least this many rounds: the ratios are the
#: figures most exposed to a neighbour's load on a shared machine, and with 3 rounds
#: one window the host stole from moves a median.
MIN_ROUNDS = 5


def _stats(times, steals):
    out = {"median_s": float(np.median(times)), "min_s": float(min(times)), "max_s": float(max(times)),
           "repeats": len(times)}
    if all(s is not None for s in steals):
        # The host's steal in each timed window: how much noise these timings took.
        out["host_steal"] = [round(s, 4) for s in steals]
    return out


def interleaved(fns: dict, repeats: int) -> dict:
    """Median, min and max seconds of each of ``fns``, run in turn within each round.

    On a shared machine the speed drifts over minutes; running the contenders one after
    another in every round puts the same drift into each, so their ratio holds where
    back-to-back blocks of repeats would not. A value of ``fns`` is a zero-argument
    function, or a pair ``(setup, fn)``: ``fn(setup())`` is timed, ``setup()`` is not.
    Each contender's stats carry the host's steal over its timed windows
    (`host_cpu_times`), where the system reports it.
    """
    times, steals = {k: [] for k in fns}, {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            setup, fn = fn if isinstance(fn, tuple) else (None, fn)
            state = setup() if setup else None
            cpu, start = host_cpu_times(), time.perf_counter()
            fn(state) if setup else fn()
            times[k].append(time.perf_counter() - start)
            steals[k].append(steal_share(cpu, host_cpu_times()))
    return {k: _stats(times[k], steals[k]) for k in fns}


def timed(fn, repeats: int) -> dict:
    """Median, min and max seconds of ``fn()`` over ``repeats``."""
    return interleaved({"fn": fn}, repeats)["fn"]


def batches(fn, points, batch: int):
    """A zero-argument run of ``fn`` over ``points`` in batches (traced on the first)."""
    chunks = [points[i : i + batch] for i in range(0, points.shape[0], batch)]
    sync(fn(chunks[0]))

    def run():
        for c in chunks:
            out = fn(c)
        sync(out)

    return run


MATMUL_SIZE = 2048
MATMUL_FLOPS = 2 * MATMUL_SIZE**3


def matmul_run():
    """A zero-argument float32 ``MATMUL_SIZE``-square matmul, traced: the machine's rate."""
    a = normal_data(MATMUL_SIZE, MATMUL_SIZE)
    fn = tf.function(lambda a: tf.matmul(a, a))
    sync(fn(a))
    return lambda: sync(fn(a))


def matmul_gflops(rounds: int = MIN_ROUNDS) -> float:
    """The machine's float32 matmul rate now, GFLOP/s (median of ``rounds``)."""
    return MATMUL_FLOPS / timed(matmul_run(), rounds)["median_s"] / 1e9


def whole_executions(steps: int, per_call: int) -> int:
    """``steps`` rounded up to a multiple of ``per_call``, Keras' ``steps_per_execution``:
    Keras 3 runs whole executions, and the models refuse any other count."""
    return -(-steps // per_call) * per_call


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


# ------------------------------------------------------------------- the models

#: `compile_as_paper`'s default. Keras 3 runs whole executions of this many steps, so
#: every timed step count is a multiple of it (`whole_executions`).
STEPS_PER_EXECUTION = 10


def maf_as_paper(D: int, hidden, jit_compile: bool = False, **kwargs):
    """Our MAF (5) of ``hidden`` units, compiled as the paper trains it."""
    import keras_models as km
    from keras_models import training

    model = km.MAF(D, hidden_units=hidden, num_layers=5, seed=0, **kwargs)
    return training.compile_as_paper(model, "maf5", jit_compile=jit_compile, steps_per_execution=STEPS_PER_EXECUTION)


def tfp_peer(D: int, hidden, jit_compile: bool = False):
    """TFP's own MAF (5) of ``hidden`` units and its Adam step: ``(flow, step)``.

    `tfb.MaskedAutoregressiveFlow` over `tfb.AutoregressiveNetwork`, with
    `tfb.BatchNormalization` and the order reversed between layers, trained by Adam in a
    GradientTape step under `tf.function` (with XLA if ``jit_compile``). TFP's networks are
    tf_keras layers, so this imports tf_keras for the peer only."""
    import tf_keras

    tfd, tfb = tfp.distributions, tfp.bijectors
    bijectors = []  # data side first
    for i in range(5):
        made = tfb.AutoregressiveNetwork(params=2, hidden_units=hidden, activation="relu", event_shape=[D])
        bijectors += [tfb.BatchNormalization(), tfb.MaskedAutoregressiveFlow(made)]
        if i < 4:
            bijectors.append(tfb.Permute(list(reversed(range(D)))))
    flow = tfd.TransformedDistribution(tfd.MultivariateNormalDiag(loc=tf.zeros(D)), tfb.Chain(bijectors))
    flow.log_prob(tf.zeros([2, D]))  # builds the variables
    optimizer = tf_keras.optimizers.Adam(1e-4)

    @tf.function(jit_compile=jit_compile)
    def step(x):
        with tf.GradientTape() as tape:
            loss = -tf.reduce_mean(flow.log_prob(x))
        variables = flow.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    return flow, step


#: After how many steps the MNIST dead-unit count is taken (500: one epoch).
DEAD_UNIT_STEPS = (20, 100, 500)


def mean_and_2se(values) -> tuple[float, float]:
    """The mean of ``values`` (per-example log-likelihoods, say) and two standard errors."""
    values = np.asarray(values, np.float64)
    return float(values.mean()), float(2 * values.std(ddof=1) / np.sqrt(len(values)))


def dead_units(model, x) -> int:
    """The first hidden layer's relu units never active on ``x``."""
    made = model.made if hasattr(model, "made") else model.mades[0]
    pre_activation = made.hidden_layers[0](x).numpy()
    return int(((pre_activation > 0).mean(0) == 0).sum())


def dead_unit_run(splits, name: str, learning_rate: float, init=None) -> dict:
    """Trains the zoo's ``name`` at MNIST's sizes with Adam at ``learning_rate``: its dead
    units after each of ``DEAD_UNIT_STEPS`` and the validation log-likelihood after the
    last. ``init(model)``, if given, sets the weights before training."""
    import keras

    from keras_models import presets, zoo

    keras.utils.set_random_seed(0)
    model = zoo.build(name, splits.event_size, **presets.model_kwargs("mnist", model=name), seed=0)
    if init is not None:
        init(model)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), jit_compile=True, steps_per_execution=10)
    pipelines = splits.pipelines(100, seed=0)
    x = splits.x_train[:5000]
    row, done = {"model": name, "learning_rate": learning_rate, "dead": {}}, 0
    for steps in DEAD_UNIT_STEPS:
        model.fit(pipelines.train.take(steps - done), epochs=1, verbose=0, shuffle=False)
        done = steps
        row["dead"][str(steps)] = dead_units(model, x)  # str: as JSON keys read back
    row["val_log_likelihood_after_500_steps"] = -float(model.evaluate(pipelines.validation, verbose=0))
    print(row, flush=True)
    return row


# ------------------------------------------------------------------- the results


def run_info(script: str, argv=None, matmul: float | None = None) -> dict:
    """The machine, the date, the library versions and the command of a result.

    ``script`` is the script's ``__file__``; ``argv`` its arguments (``sys.argv[1:]`` if
    None); ``matmul`` the float32 matmul rate the script measured, else measured here."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        path = Path(script).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        path = Path(script).name
    return {
        "cpu": cpu_model(),
        "machine_kind": machine_kind(),
        "cores": os.cpu_count(),
        "gpu": bool(tf.config.list_physical_devices("GPU")),
        "matmul_gflops": round(matmul_gflops() if matmul is None else matmul, 1),
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "tensorflow": tf.__version__,
        "tfp": tfp.__version__,
        "command": shlex.join(["python", path, *argv]),
    }


def header(result: dict, title: str) -> str:
    """The Markdown that opens a result: its title, the machine and the command."""
    cpu = result.get("cpu") or "CPU model not recorded"
    gpu = ", a GPU" if result.get("gpu") else ""
    rate = result.get("matmul_gflops")
    rate = (f"float32 matmul (2048 x 2048) {rate:.0f} GFLOP/s" if rate
            else "float32 matmul rate not measured in this run")
    return (f"## {title}\n\n"
            f"{cpu} (`{result['machine_kind']}`), {result['cores']} cores{gpu}; {rate}; {result['date']}; "
            f"TensorFlow {result['tensorflow']}, TFP {result['tfp']}.\n\n"
            f"Command: `{result['command']}`\n")


def result_path(measure: str, kind: str | None = None) -> Path:
    """``benchmarks/results/<measure>/<kind>.json``; ``kind`` defaults to this machine's."""
    return RESULTS / measure / f"{kind or machine_kind()}.json"


def save(path, result: dict, markdown: str | None = None) -> None:
    """Writes ``result`` as JSON (and ``markdown`` beside it, as .md)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    if markdown is not None:
        path.with_suffix(".md").write_text(markdown)


def report(measure: str, result: dict, markdown, out=None) -> dict:
    """Prints ``markdown(result)`` and saves both (`save`) to ``out``, else to
    `result_path` of ``measure`` on this machine's kind; returns ``result``."""
    text = markdown(result)
    print(text)
    save(out or result_path(measure, result["machine_kind"]), result, text)
    return result


class EpochTimes(keras.callbacks.Callback):
    """The wall time of each epoch of a ``fit`` (validation and the callbacks after
    this one included), in ``seconds``."""

    def __init__(self):
        super().__init__()
        self.seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)
