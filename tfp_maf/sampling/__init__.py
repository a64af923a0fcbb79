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
|  | their resolution (`Schedule`) and the tables of the loops (`BlockLayout`) |
| `layout` | the weights laid out as the loops read them |
| `loops` | the D-step loops, step by step and in blocks of degrees |
| `runner` | `sequential_pass`: the compiled loops, shared per structure, over batches of any size |

The one user of the engine is `tfp_maf.layers.MADENetwork.sample_sequentially`; the bijectors
and distributions call that.
"""

from tfp_maf.sampling.plan import Schedule, SequentialPlan, Structure, Tuning
from tfp_maf.sampling.runner import compiled_programs, sequential_pass, without_gradients

__all__ = ["Schedule", "SequentialPlan", "Structure", "Tuning", "compiled_programs", "sequential_pass",
           "without_gradients"]
