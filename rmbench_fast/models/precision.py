"""The precision a run loads its models in.

Default: --dtype, else float32 on CPU and bfloat16 on GPU. With --compat official, as the official
scripts choose: float16 (their --torch_dtype default), and 8-bit weights through bitsandbytes
(LLM.int8) unless the model path contains one of their Llama-3 spellings or the reward model's
REWARD_MODEL_CONFIG entry says not quantized or pins a dtype. --dtype bfloat16 turns 8-bit off for
reward models (run_rm.py) but not for DPO models (run_dpo.py, which takes bfloat16 if asked and
float16 otherwise). On CPU neither is possible: the run says so and uses float32.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from .device import resolve_dtype

log = logging.getLogger("rmbench_fast")
LLAMA3_SPELLINGS = {"rm": ("llama-3", "Llama3", "Llama-3", "LLaMA3", "llama3"),  # run_rm.py
                    "dpo": ("llama-3", "Llama3", "Llama-3", "LLaMA3")}  # run_dpo.py


@dataclass(frozen=True)
class Precision:
    dtype: torch.dtype
    int8: bool = False
    note: str | None = None  # how it was chosen, when it is not simply --dtype or the device's default

    def describe(self) -> dict:
        return {"dtype": str(self.dtype).replace("torch.", ""), "int8": self.int8, "note": self.note}


def choose(o, device, mode: str, quantized: bool = True, pinned: torch.dtype | None = None) -> Precision:
    """mode: rm or dpo; quantized / pinned: the REWARD_MODEL_CONFIG entry's `quantized` and
    `torch_dtype` (reward models; DPO models are always quantized by the official script)."""
    if o.compat != "official":
        return Precision(resolve_dtype(o.dtype, device))
    if device.type != "cuda":
        dtype = resolve_dtype(o.dtype, device)
        note = (f"--compat official on {device.type}: the official scripts load in float16 and mostly 8-bit, which "
                f"needs CUDA; this run uses {str(dtype).replace('torch.', '')}")
        log.warning(note)
        return Precision(dtype, False, note)
    asked = resolve_dtype(o.dtype, device) if o.dtype else torch.float16
    if mode == "dpo":  # run_dpo.py: bfloat16 if asked, else float16; 8-bit whatever the dtype
        dtype, bf16_unquantizes = (torch.bfloat16 if asked == torch.bfloat16 else torch.float16), False
    else:  # run_rm.py: the entry's pinned dtype, else --torch_dtype; bfloat16 turns 8-bit off
        dtype, bf16_unquantizes = pinned or asked, True
    int8 = (quantized and pinned is None and not (bf16_unquantizes and asked == torch.bfloat16)
            and not any(s in o.model for s in LLAMA3_SPELLINGS[mode]))
    return Precision(dtype, int8, "as the official scripts choose (--compat official)")
