"""Where a training step's time goes, beside zuko's and nflows': the forward pass, the
backward pass and the optimizer's update, each timed.

`speed.py` times whole steps. Where a step loses to a torch peer (config A at batch
1,000 on some machine kinds), this script says which part: three programs per contender,
each one part longer than the last, on one batch of N(0, I) data:

  - ``forward``: the loss ``-mean(log_prob(x))`` in training mode (the batch norms
    normalise by the batch);
  - ``+ backward``: the loss and its gradients with respect to every weight;
  - ``+ update``: the whole step, the optimizer's update included.

Ours (MAF (5), `compile_as_paper`'s Adam) runs its own train step for the last, as `fit`
runs it (its update masks the MADEs' gradients, then applies Adam), and the same forward
pass and tape for the first two, with XLA
(`compile_as_paper`'s default for long runs) and without. zuko's and nflows' MAF (the
``bench`` extra) run under `torch.compile` with PyTorch's fused Adam (`_torch_peers`),
their forward under ``no_grad``. A part's time is the difference of two programs'.
Contenders run in turn within each round (`_common.interleaved`); figures are medians,
in ms per step.

    python benchmarks/experiments/step_parts.py                 # config A, batch 1,000
    python benchmarks/experiments/step_parts.py --batch 100
    python benchmarks/experiments/step_parts.py --rounds 2      # a smoke run

Writes benchmarks/results/step_parts/<machine kind>.json and .md (`_common.report`), the
folder's name extended by the batch where it is not 1,000.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common

import _torch_peers as torch_peers  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _common import MIN_ROUNDS, header, interleaved, maf_as_paper, report, run_info  # noqa: E402

from tfp_maf.layers import hold_kernel_masks, kernels_as_stored  # noqa: E402

D, HIDDEN = 43, [512, 512]  # config A
PARTS = ("forward", "+ backward", "+ update")
#: Steps a timed run takes: about half a second at batch 1,000 on 2 cores.
STEPS = {100: 100, 1000: 10}


def ours(batch: np.ndarray, jit: bool, steps: int) -> dict:
    """Our three programs, ``{part: run}``: each ``run()`` takes ``steps`` steps."""
    model = maf_as_paper(D, HIDDEN, jit_compile=jit)
    model.optimizer.build(model.trainable_variables)
    hold_kernel_masks(model)  # as `fit` does before its first step
    x = tf.constant(batch)
    variables = model.trainable_variables

    def loss():
        # As `fit`'s train step reads the layers (`speed.py` times that step).
        with kernels_as_stored():
            return -tf.reduce_mean(model.log_prob(x, training=True))

    def gradients():
        with tf.GradientTape() as tape:
            value = loss()
        return tape.gradient(value, variables)

    programs = {"forward": loss, "+ backward": gradients, "+ update": lambda: model.train_step(x)}
    return {part: _repeated(tf.function(fn, jit_compile=jit), steps) for part, fn in programs.items()}


def _repeated(fn, steps: int):
    """A run of ``steps`` calls of the traced ``fn`` (traced and compiled here), synced."""
    tf.nest.map_structure(lambda t: t.numpy(), fn())

    def run():
        for _ in range(steps):
            out = fn()
        tf.nest.map_structure(lambda t: t.numpy(), out)

    return run


def torch_peer(name: str, batch: np.ndarray, steps: int) -> dict:
    """A torch peer's three programs, ``{part: run}``."""
    import torch

    x = torch.from_numpy(np.ascontiguousarray(batch))
    flow, log_prob, _ = torch_peers.build(name, D, HIDDEN)
    flow.train()
    optimizer = torch.optim.Adam(flow.parameters(), lr=1e-4, fused=True)
    loss_fn = torch.compile(lambda x: -log_prob(x).mean())

    def forward():
        with torch.no_grad():
            return loss_fn(x)

    def backward():
        optimizer.zero_grad(set_to_none=True)
        value = loss_fn(x)
        value.backward()
        return value

    def update():
        value = backward()
        optimizer.step()
        return value

    runs = {}
    for part, fn in zip(PARTS, (forward, backward, update), strict=True):
        for _ in range(10):  # compiles (the first few calls recompile)
            fn()

        def run(fn=fn):
            for _ in range(steps):
                out = fn()
            float(out.detach())

        runs[part] = run
    return runs


def measure(batch_size: int, rounds: int) -> dict:
    batch = np.random.default_rng(0).standard_normal((batch_size, D)).astype(np.float32)
    steps = STEPS.get(batch_size, max(1, 10_000 // batch_size))
    contenders = {"tfp-maf": ours(batch, True, steps), "tfp-maf, no XLA": ours(batch, False, steps)}
    for name in torch_peers.available():
        contenders[name] = torch_peer(name, batch, steps)
    runs = {(name, part): run for name, parts in contenders.items() for part, run in parts.items()}
    stats = interleaved(runs, rounds)
    return {name: {part: round(1000 * stats[(name, part)]["median_s"] / steps, 3) for part in PARTS}
            for name in contenders}


def markdown(result: dict) -> str:
    times = result["ms_per_step"]
    names = list(times)
    peers = [n for n in names if not n.startswith("tfp-maf")]
    rows = {"forward": lambda t: t["forward"], "backward": lambda t: t["+ backward"] - t["forward"],
            "optimizer's update": lambda t: t["+ update"] - t["+ backward"], "whole step": lambda t: t["+ update"]}
    lines = [header(result, f"Parts of a training step, config A at batch {result['batch']:,} "
                            "(`benchmarks/experiments/step_parts.py`)"),
             f"ms per step, medians of {result['rounds']} interleaved rounds; a part is the difference "
             "of two programs' times.", "",
             "| part | " + " | ".join(names) + (" | tfp-maf's time / best peer's |" if peers else " |"),
             "|---|" + "---|" * (len(names) + bool(peers))]
    for label, part in rows.items():
        values = {n: part(times[n]) for n in names}
        ratio = ""
        if peers:
            best = min(values[p] for p in peers)
            ratio = f" | {values['tfp-maf'] / best:.2f}x" if best > 0 else " | -"
        lines.append(f"| {label} | " + " | ".join(f"{values[n]:.2f}" for n in names) + ratio + " |")
    lines += ["", "A ratio above 1 is a part where tfp-maf takes longer. zuko's MAF has no batch norm; "
              "nflows' has one after each layer, as ours."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    parser.add_argument("--out", default=None, help="the .json to write (default: see above)")
    args = parser.parse_args(argv)
    result = {**run_info(__file__, argv), "batch": args.batch, "rounds": args.rounds,
              "ms_per_step": measure(args.batch, args.rounds)}
    measure_name = "step_parts" + ("" if args.batch == 1000 else f"_batch_{args.batch}")
    return report(measure_name, result, markdown, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
