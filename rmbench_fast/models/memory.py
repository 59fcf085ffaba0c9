"""How much memory a model pass needs, before anything is loaded, and how much it took.

Weights: every tensor's element count from the safetensors headers (the index's files, or every
*.safetensors of the folder; nothing is loaded) times the run dtype's size (floating tensors; other
tensors keep their own), 8-bit where the run quantises (bitsandbytes LLM.int8: one byte per element
of a linear weight plus an fp32 scale per row; embeddings and the heads stay in the run dtype).
Without local safetensors (a hub id, pickle weights) the model is built on the meta device from its
config and its parameters counted.

Activations of one batch of B rows of T padded tokens (N = B * T), dtype size s, inference mode, so
a tensor is freed when its last reference goes: the residual stream and the embedding / norm output
(2 N d s) plus the larger of one layer's MLP (gate, up, act(gate) * up and the norm output:
N s (3 I + 2 d)) and its attention (q, k, v, their rotated copies, the output: N s (4 q + 4 kv + 2 d),
with eager attention also B heads T^2 scores, their fp32 softmax and its cast; with SDPA no T^2
term), plus an attention mask of B T^2 bytes where the model gets one (not a causal decoder's whole
right-padded rows, which run without: scorers.base.Scorer.masks_attention). DPO adds the base model's output and the gathered
response rows (M rows, N d s + M d s) and the fused head's chunk buffers (fp32); its once-per-pass
head check runs one sequence's full logits. Measured on tiny Llamas, this is within a few per cent
of the allocator's peak (tests/test_preflight.py).

Measuring: on CUDA torch.cuda.max_memory_allocated; on the CPU, `cpu_peak` replays the allocation
events torch's profiler records (profile_memory=True) to the largest number of live bytes, which is
what the CPU allocator held for the batch beyond what was allocated before it (process RSS moves
with glibc's caches and the interpreter, too much to compare on tiny models).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .kinds import text_config
from .versions import transformers_version
from .weight_files import read_header, safetensors_files

SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
                     "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "U16": 2, "U32": 4, "U64": 8}
FLOATS = ("F64", "F32", "F16", "BF16")
LAYER = re.compile(r"^(.*?\.(?:layers|h|blocks|layer)\.\d+)\.")  # a decoder block's prefix
BLOCK = re.compile(r"\.(?:layers|h|blocks|layer)\.\d+$")  # a decoder block's module name
KEEP_INT8 = ("embed", "wte", "wpe", "lm_head", "score", "head", "norm", "ln_")  # modules LLM.int8 leaves alone
CPU_ROW_CHUNK, CPU_VOCAB_CHUNK = 1024, 1024  # kernels.logprob_torch's CPU defaults
CHECK_TOKENS = 64  # scorers.dpo.CHECK_TOKENS: the head check's scored tokens


@dataclass
class Weights:
    bytes: int  # in the run's dtype (8-bit where quantised)
    params: int  # elements
    largest_block: int  # bytes of the largest decoder block (what an offloaded block brings on at a time)
    source: str  # where the counts come from

    def describe(self) -> dict:
        return {"bytes": self.bytes, "params": self.params, "largest_block": self.largest_block, "source": self.source}


def tensor_bytes(name: str, dtype: str, shape, size: int, int8: bool) -> tuple[int, int]:
    """(elements, bytes in the run) of one stored tensor."""
    n = 1
    for x in shape:
        n *= int(x)
    if dtype not in FLOATS:
        return n, n * SAFETENSORS_BYTES.get(dtype, 4)
    if int8 and len(shape) == 2 and name.endswith(".weight") and not any(k in name for k in KEEP_INT8):
        return n, n + 4 * int(shape[0])
    return n, n * size


def weights_from_files(folder: Path, size: int, int8: bool = False) -> Weights | None:
    """The weights of a local folder's safetensors in the run's dtype (size: bytes per element)."""
    files = safetensors_files(folder)
    if not files:
        return None
    total = params = 0
    blocks: dict[str, int] = {}
    for f in files:
        for name, (dtype, shape) in read_header(f).items():
            n, b = tensor_bytes(name, dtype, shape, size, int8)
            params, total = params + n, total + b
            m = LAYER.match(name)
            if m:
                blocks[m.group(1)] = blocks.get(m.group(1), 0) + b
    return Weights(total, params, max(blocks.values(), default=0), "safetensors headers")


def weights_from_config(config, mode: str, size: int) -> Weights | None:
    """The parameters of the model the config builds, on the meta device (nothing allocated)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    cls = AutoModelForSequenceClassification if mode == "rm" else AutoModelForCausalLM
    try:
        with torch.device("meta"):
            model = cls.from_config(config)
    except Exception:  # a config the Auto class cannot build (remote code, a stored config): no estimate
        return None
    params = sum(p.numel() for p in model.parameters())
    blocks = [sum(p.numel() for p in m.parameters()) for n, m in model.named_modules() if BLOCK.search(n)]
    return Weights(params * size, params, max(blocks, default=0) * size, "config (a model built on the meta device)")


def model_weights(path: str, config, mode: str, size: int, int8: bool = False) -> Weights | None:
    folder = Path(path).expanduser()
    if folder.is_dir():
        found = weights_from_files(folder, size, int8)
        if found is not None:
            return found
    if getattr(config, "stored", False):  # the meta-device build needs the config class: the real config
        config = config.real
    return weights_from_config(config, mode, size)


@dataclass(frozen=True)
class Shape:
    """What activations depend on, from a model's (text) config."""
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    eager: bool  # eager attention (T^2 scores), else SDPA / flash

    @staticmethod
    def of(config, attn: str | None = None) -> Shape:
        c = text_config(config)
        d = int(_first(c, ("hidden_size", "n_embd", "d_model"), 0))
        heads = int(_first(c, ("num_attention_heads", "n_head"), 1) or 1)
        kv = int(_first(c, ("num_key_value_heads",), heads) or heads)
        hd = int(_first(c, ("head_dim",), 0) or d // heads)
        inter = int(_first(c, ("intermediate_size", "n_inner", "ffn_dim"), 0) or 4 * d)
        # as asked in the config (transformers 4.x's `_attn_implementation` answers "eager" when nothing was
        # asked, though loading then picks SDPA): None means the class's default, SDPA where it has it
        attn = attn or _first(c, ("_attn_implementation_internal", "attn_implementation"), None)
        return Shape(d, inter, heads, kv, hd, int(_first(c, ("vocab_size",), 0)), attn == "eager")


def _first(c, names, default):
    for n in names:
        v = getattr(c, n, None)
        if v is not None:
            return v
    return default


def decoder_bytes(shape: Shape, rows: int, width: int, size: int, masked: bool = True) -> int:
    """Peak live bytes of a decoder forward over rows x width tokens (see the module docstring); masked:
    the model expands an attention mask to rows x width x width."""
    n, d = rows * width, shape.hidden
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    mlp = 3 * shape.intermediate + 2 * d
    attn = (5 * q + 7 * kv) // 2 + 2 * d
    if transformers_version() < (5,):  # 4.x copies q, k, v contiguous for SDPA and repeats grouped k, v heads
        attn += q + (2 * q if kv < q else 0)
    scores = rows * shape.heads * width * width * (size + 4) if shape.eager else 0
    return n * size * (2 * d + max(mlp, attn)) + scores + (rows * width * width if masked else 0)


def head_bytes(shape: Shape, rows: int, width: int, scored: int, size: int, impl: str) -> int:
    """DPO after the decoder: its output, the gathered response rows and the log-prob op's buffers."""
    d, v, n = shape.hidden, shape.vocab, rows * width
    if impl == "plain":  # the model's own logits, then a row chunk of them in fp32
        return n * v * size + scored * v * size + max(1, (1 << 22) // max(v, 1)) * v * 4 * 2
    chunk = 2 * min(CPU_ROW_CHUNK, scored) * min(CPU_VOCAB_CHUNK, v) * 4 if impl == "torch" else 0
    return n * d * size + scored * d * (size + 4) + chunk


def check_bytes(shape: Shape, width: int, size: int) -> int:
    """The DPO head check: one sequence's full logits (model dtype), and three [64, V] fp32 tensors."""
    return decoder_bytes(shape, 1, width, size) + width * shape.vocab * (size + 4) + 3 * CHECK_TOKENS * shape.vocab * 4


@contextmanager
def cpu_peak():
    """Yields a dict whose "bytes" is, after the block, the peak of live CPU-allocator bytes the block
    allocated (torch's profiler's memory events, replayed in order); None when a profiler is
    already running in this process (it cannot be started twice)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    out = {"bytes": None}
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    try:
        prof.__enter__()
    except RuntimeError:
        yield out
        return
    try:
        yield out
    finally:
        prof.__exit__(None, None, None)
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == DeviceType.CPU]
    events.sort(key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    out["bytes"] = peak


def resident_bytes(model) -> int:
    """Bytes of a loaded model's parameters and buffers held in memory (not offloaded to the meta device)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.device.type == "meta" or id(t) in seen:
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
    return total
