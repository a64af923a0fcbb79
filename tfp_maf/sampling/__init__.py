"""Exact sequential passes through a MADE at the cost of about one forward pass.

Sampling from an autoregressive model sets x in order: the variable of degree t needs the
network's outputs for it, which depend on the variables of degree < t only. Re-running the
whole MADE at every step (what TFP, nflows, zuko and the paper's code do) costs D passes.

The masks say exactly which hidden units a step can change: a unit of degree k reads only
inputs (or units) of degree <= k, so its value is final once the variables of degree <= k
are set, and never changes afterwards. So each unit and output is computed once, when it
becomes final: about the work of one forward pass, spread over D steps.

| module | what it holds |
|---|---|
| `plan` | what the engine reads of a MADE (`Structure`, `SequentialPlan`), its knobs (`Tuning`), |
|  | their resolution (`Schedule`) and the tables of the loops (`LoopTables`) |
| `layout` | the weights laid out as the loops read them |
| `loops` | the D-step loops, step by step and in blocks of degrees |
| `runner` | `sequential_pass`: the compiled loops, shared per size, over batches of any size |
| `made` | what the engine reads of a `tfp_maf.layers.MADENetwork`, and `sample_sequentially` |
| `modes` | how a sampler is traced: the textbook loop instead, for graphs that leave |
|  | TensorFlow (`full_passes`), without XLA (`without_xla`), without gradients |
|  | (`without_gradients`) |

The bijectors and distributions call `sample_sequentially`; the layers never import the
engine.

Example: the forward pass of a `tfp_maf.MaskedAutoregressive` gives what the textbook
loop of D full passes gives (the engine's schedule is set per MADE, `Tuning`):

>>> import numpy as np
>>> from tfp_maf import MADENetwork, MaskedAutoregressive
>>> from tfp_maf.sampling import Tuning
>>> made = MADENetwork(2, hidden_units=[8], output_kernel_initializer="glorot_uniform", seed=0)
>>> made.sampling_tuning = Tuning(block_steps=1)  # step by step (the default for small MADEs)
>>> u = np.random.RandomState(0).standard_normal((4, 2)).astype(np.float32)
>>> x = MaskedAutoregressive(made).forward(u)  # one pass, spread over D = 2 steps
>>> x_loop = np.zeros_like(u)
>>> for _ in range(2):  # D full passes
...     shift, log_scale = made(x_loop)
...     x_loop = u * np.exp(log_scale) + shift
>>> bool(np.allclose(x, x_loop, atol=1e-5))
True
"""

from tfp_maf.sampling.made import can_sample, sample_sequentially, weights_of
from tfp_maf.sampling.modes import full_passes, full_passes_active, without_gradients, without_xla
from tfp_maf.sampling.plan import Schedule, SequentialPlan, Structure, Tuning
from tfp_maf.sampling.runner import compiled_loops, compiled_programs, sequential_pass

__all__ = ["Schedule", "SequentialPlan", "Structure", "Tuning", "can_sample", "compiled_loops", "compiled_programs",
           "full_passes", "full_passes_active", "sample_sequentially", "sequential_pass", "weights_of",
           "without_gradients", "without_xla"]
