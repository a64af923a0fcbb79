"""PyTorch peers of `speed.py`: zuko's and nflows' MAF, at their strongest (`torch.compile`).

Both are built at the size of ours (5 autoregressive layers, MADEs of the same hidden
units, relu, the order reversed between layers). nflows' flow has a batch norm after
each layer, as ours and TFP's; zuko's MAF has none (it offers none). Training is Adam at
the paper's step size 1e-4 on the loss ``-mean(log_prob(x))``, with the loss and its
gradient compiled by `torch.compile` and PyTorch's fused Adam. Sampling is each library's own, under `no_grad`.

Installed by the ``bench`` extra (``pip install -e '.[bench]'``; on a machine without a GPU,
install a CPU build of torch first). `available()` lists the peers that import.
"""

from __future__ import annotations

import functools

import numpy as np

NAMES = ("zuko", "nflows")


def available() -> list[str]:
    """The peers whose libraries import here."""
    out = []
    for name in NAMES:
        try:
            __import__("torch")
            __import__(name)
        except ImportError:
            continue
        out.append(name)
    return out


def build(name: str, D: int, hidden) -> tuple:
    """``(module, log_prob, sample)`` for the peer ``name`` with MADEs of ``hidden`` units."""
    import torch

    torch.manual_seed(0)
    if name == "zuko":
        import zuko

        flow = zuko.flows.MAF(D, transforms=5, hidden_features=list(hidden))
        return flow, lambda x: flow().log_prob(x), lambda n: flow().sample((n,))
    if name == "nflows":
        from nflows import distributions, flows, transforms

        layers = []
        for i in range(5):
            # No residual blocks: one masked layer in, len(hidden) - 1 masked layers between,
            # one out, as ours.
            layers.append(transforms.MaskedAffineAutoregressiveTransform(
                features=D, hidden_features=hidden[0], num_blocks=len(hidden) - 1,
                use_residual_blocks=False, activation=torch.relu))
            layers.append(transforms.BatchNorm(D))
            if i < 4:
                layers.append(transforms.ReversePermutation(D))
        flow = flows.Flow(transforms.CompositeTransform(layers), distributions.StandardNormal([D]))
        return flow, flow.log_prob, flow.sample
    raise ValueError(f"unknown peer {name!r}; expected one of {NAMES}.")


def train(name: str, D: int, hidden, x: np.ndarray, steps: int):
    """``(setup, run)`` for `_common.interleaved`: one compiled flow for every round (built and
    compiled in the first ``setup``), then ``steps`` Adam steps on batches of ``x``."""
    import torch

    batch = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))

    @functools.cache
    def setup():
        flow, log_prob, _ = build(name, D, hidden)
        flow.train()
        # fused: PyTorch's one-kernel Adam for CPU. (A compiled `optimizer.step` recompiled
        # on each of its first steps, as Adam's state filled: tens of seconds each.)
        optimizer = torch.optim.Adam(flow.parameters(), lr=1e-4, fused=True)
        loss_fn = torch.compile(lambda x: -log_prob(x).mean())

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(batch)
            loss.backward()
            optimizer.step()
            return loss

        for _ in range(10):  # compiles the loss and its gradient (the first few steps recompile)
            step()
        return step

    def run(step):
        for _ in range(steps):
            loss = step()
        float(loss.detach())

    return setup, run


def log_prob_run(name: str, D: int, hidden, points: np.ndarray, batch: int):
    """A zero-argument run of the peer's compiled ``log_prob`` over ``points`` in batches
    (compiled on the first)."""
    import torch

    flow, log_prob, _ = build(name, D, hidden)
    flow.eval()  # nflows' batch norm uses its running statistics, as ours evaluates
    compiled = torch.compile(log_prob)
    chunks = [torch.from_numpy(np.ascontiguousarray(points[i : i + batch], dtype=np.float32))
              for i in range(0, len(points), batch)]

    def run():
        with torch.no_grad():
            for c in chunks:
                out = compiled(c)
        float(out[0])

    run()
    return run


def sample_run(name: str, D: int, hidden, n: int):
    """A zero-argument draw of ``n`` samples from the peer (D passes per layer, eager)."""
    import torch

    flow, _, sample = build(name, D, hidden)
    flow.eval()

    def run():
        with torch.no_grad():
            float(sample(n)[0, 0])

    return run
