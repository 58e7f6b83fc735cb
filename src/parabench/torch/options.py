"""The options of the torch case builder (:mod:`parabench.torch.build`), declared once.

Usage (a torch method reads them through the builder, so it declares them)::

    class Mine(Method):
        options = {**TORCH_OPTIONS, "knob": OptionSpec(int, "what it does", default=1)}

Kept apart from the builder so a method's declaration does not import torch.
"""

from __future__ import annotations

from parabench.config import OptionSpec

#: applied to the built model from outside (:mod:`parabench.torch.knobs`) by every torch
#: method. Both change the work timed (recompute; other kernels), so a speed ratio's baseline
#: shares them. Checkpointing recomputes the same numbers (trajectory graded against serial as
#: ever); compile's kernels drift from eager's within float precision, below the exact
#: tolerances (docs/methods.md has the figures), so neither changes the math
KNOBS: dict[str, OptionSpec] = {
    "activation_checkpointing": OptionSpec(
        bool, "activation checkpointing (non-reentrant) of the model's segments: less "
              "activation memory, one more forward", default=False, equal_work=True,
        family="torch"),
    "compile": OptionSpec(bool, "torch.compile the model (compiled in start-up)",
                          default=False, equal_work=True, family="torch"),
}
#: the DataLoader knobs change the work timed (the baseline's loader must do it too); the
#: precision changes what is computed (parity's baseline must share it)
TORCH_OPTIONS: dict[str, OptionSpec] = {
    "num_workers": OptionSpec(int, "DataLoader worker processes (0: batches sliced in-loop)",
                              minimum=0, default=0, equal_work=True, family="torch"),
    "pin_memory": OptionSpec(bool, "DataLoader pin_memory (page-locked host batches)",
                             default=False, equal_work=True, family="torch"),
    "precision": OptionSpec(str, "fp32, or bf16/fp16 autocast", choices=("fp32", "bf16", "fp16"),
                            default="fp32", changes_math=True, family="torch"),
    **KNOBS,
}
#: the stage count of the staged methods; each declares its own default (:meth:`with_default`)
STAGES = OptionSpec(int, "pipeline / model-parallel stage count", minimum=1)
