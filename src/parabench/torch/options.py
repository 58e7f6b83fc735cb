"""The options of the torch case builder (:mod:`parabench.torch.build`), declared once.

Usage (a torch method reads them through the builder, so it declares them)::

    class Mine(Method):
        options = {**TORCH_OPTIONS, "knob": OptionSpec(int, "what it does", default=1)}

Kept apart from the builder so a method's declaration does not import torch.
"""

from __future__ import annotations

from parabench.config import OptionSpec

#: the DataLoader knobs change the work timed (the baseline's loader must do it too); the
#: precision changes what is computed (parity's baseline must share it)
TORCH_OPTIONS: dict[str, OptionSpec] = {
    "num_workers": OptionSpec(int, "DataLoader worker processes (0: batches sliced in-loop)",
                              minimum=0, default=0, equal_work=True, family="torch"),
    "pin_memory": OptionSpec(bool, "DataLoader pin_memory (page-locked host batches)",
                             default=False, equal_work=True, family="torch"),
    "precision": OptionSpec(str, "fp32, or bf16/fp16 autocast", choices=("fp32", "bf16", "fp16"),
                            default="fp32", changes_math=True, family="torch"),
}
#: the stage count of the staged methods; each declares its own default (:meth:`with_default`)
STAGES = OptionSpec(int, "pipeline / model-parallel stage count", minimum=1)
