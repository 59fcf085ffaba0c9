"""Checks before any work: options, models, tokenizers and output folders that do not fit
together are one-line UsageErrors naming what and where, raised before a model pass starts.
prepare loads everything first (engine.prepare.load_run), then check_run checks it all here."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

from ..errors import UsageError
from ..inputs.layout import sequence_name
from ..inputs.tokenize import Encoded
from ..models.kinds import architectures, is_reward_model
from .option_names import cli_name
from .options import (COMPAT, DEVICE_MAPS, DTYPES, ENGINES, LOGPROB_IMPLS, MODES, REF_FREE, SCORED_OPTIONS,
                      ScoreOptions, max_memory_budgets)


def check_options(o: ScoreOptions, name=cli_name):
    """Options that do not fit, each a one-line UsageError; `name` (engine.option_names) says how the
    message names an option: the CLI's flags by default, the Python API's keyword arguments for it."""
    def one_of(field, choices):
        return f"{name(field, getattr(o, field))}: expected one of {', '.join(choices)}"

    if o.mode not in MODES:
        raise UsageError(one_of("mode", MODES))
    if o.ref_free is not None and o.ref_free not in REF_FREE:
        raise UsageError(one_of("ref_free", REF_FREE))
    if o.ref_free is not None and o.ref_model is not None:
        raise UsageError(f"{name('ref_free')} and {name('ref_model')} exclude each other: the reference-free rewards "
                         "use no reference")
    if o.engine not in ENGINES:
        raise UsageError(one_of("engine", ENGINES))
    if o.num_workers < 1:
        raise UsageError(f"{name('num_workers')} must be at least 1")
    if o.compat is not None and o.compat not in COMPAT:
        raise UsageError(f"{name('compat', o.compat)}: the only compatibility mode is 'official'")
    if o.dtype is not None and o.dtype not in DTYPES:
        raise UsageError(one_of("dtype", DTYPES))
    if o.logprob_impl not in LOGPROB_IMPLS:
        raise UsageError(one_of("logprob_impl", LOGPROB_IMPLS))
    for field in ("max_tokens_per_batch", "max_batch_size", "prefix_cache_mb", "limit"):
        if getattr(o, field) is not None and getattr(o, field) < 1:
            raise UsageError(f"{name(field)} must be at least 1")
    if o.tp < 1:
        raise UsageError(f"{name('tp')} must be at least 1")
    if o.engine == "ray" and o.gpus_per_worker > 1 and o.tp == 1:
        raise UsageError(f"{name('gpus_per_worker', o.gpus_per_worker)}: a worker's model goes over its GPUs as a "
                         f"tensor-parallel group, one rank a GPU: pass {name('tp', o.gpus_per_worker)} too")
    if o.engine == "ray" and o.gpus_per_worker > 0 and o.tp > 1 and o.tp != o.gpus_per_worker:
        raise UsageError(f"{name('tp', o.tp)} with {name('gpus_per_worker', o.gpus_per_worker)}: each Ray worker's "
                         f"group has one rank a GPU: give both the same number (or {name('gpus_per_worker', 0)} for "
                         "CPU workers)")
    if o.tp > 1 and o.share_prefix is True:
        raise UsageError(f"{name('tp', o.tp)} with {name('share_prefix')}: shared prefixes are not kept across "
                         "tensor-parallel ranks; use one of them")
    check_placement(o, name)


def check_placement(o: ScoreOptions, name=cli_name) -> None:
    """--device-map, --max-memory and --offload-folder against each other and the other options."""
    try:
        budgets = max_memory_budgets(o.max_memory)
    except (ValueError, AttributeError) as e:
        example = name("max_memory", {"0": "70GiB", "cpu": "200GiB"})
        raise UsageError(f"{name('max_memory')}: {e}; give DEVICE=SIZE pairs, e.g. {example}") from None
    if o.offload_folder is not None and not o.device_map:
        raise UsageError(f"{name('offload_folder')} is where {name('device_map')} offloads to disk: pass "
                         f"{name('device_map', 'auto')} too, or drop it")
    if not o.device_map:
        return
    if o.device_map not in DEVICE_MAPS:
        raise UsageError(f"{name('device_map', o.device_map)}: expected one of {', '.join(DEVICE_MAPS)}")
    if o.engine == "ray":
        raise UsageError(f"{name('device_map')} places one model over this machine's devices, but "
                         f"{name('engine', 'ray')} gives each worker a whole model: drop one of them "
                         f"({name('gpus_per_worker')} gives a Ray worker several GPUs)")
    if (getattr(o, "tp", None) or 1) > 1:
        raise UsageError(f"{name('device_map')} and {name('tp')} both split the model over the GPUs: choose one of "
                         "them")
    if o.device is not None and ":" in o.device:
        raise UsageError(f"{name('device_map', o.device_map)} spreads the model over every visible device, but "
                         f"{name('device', o.device)} names one: drop {name('device')} (choose the GPUs with "
                         f"CUDA_VISIBLE_DEVICES or {name('max_memory')}), or drop {name('device_map')}")
    if o.device is not None and o.device.startswith("cpu") and any(isinstance(k, int) for k in budgets):
        raise UsageError(f"{name('max_memory')} names a GPU, but {name('device', 'cpu')} places the model on the "
                         f"CPU (and disk) only: drop the GPU entries or {name('device', 'cpu')}")
    if o.share_prefix is True:
        raise UsageError(f"{name('share_prefix')} keeps each prompt's KV cache on one device, which "
                         f"{name('device_map')} does not give: drop one of them")


def check_kind(path: str, config, mode: str, what: str) -> None:
    """A sequence classifier given as a DPO model, or a causal LM as a reward model, is an error."""
    archs = architectures(config)
    if not archs:
        return
    is_rm = is_reward_model(config)
    if mode == "dpo" and is_rm:
        raise UsageError(f"{what} {path} is a sequence classifier ({archs[0]}): it has no language-model head to "
                         f"score as a DPO {'policy' if what == 'model' else 'reference'}; use --mode rm")
    if mode == "rm" and not is_rm:
        raise UsageError(f"{what} {path} is not a sequence classifier ({archs[0]}): score it as a DPO model "
                         "(--mode dpo) or give a reward model")


# Families transformers 4.x's tensor parallelism splits wrongly (checked with its own classes under
# 4.51, two gloo ranks: Gemma-2's MLP stays whole while its attention is split, a shape error in the
# first layer); transformers 5 splits them right.
TP_BROKEN_4X = ("gemma2",)


def check_tp(o: ScoreOptions, config, path: str) -> None:
    from ..models.versions import transformers_version

    if o.tp < 2 or transformers_version() >= (5,):
        return
    version = ".".join(map(str, transformers_version()))
    kind = getattr(config, "model_type", None)
    if kind in TP_BROKEN_4X:
        raise UsageError(f"--tp {o.tp}: {path} is a {kind} model, which transformers {version}'s tensor parallelism "
                         "splits wrongly; use transformers >= 5 for --tp, or --device-map auto")
    ints = integer_tensors(path)
    if ints:  # 4.x makes every loaded tensor a Parameter that requires grad, which an integer one cannot be
        raise UsageError(f"--tp {o.tp}: {path} holds integer tensors ({', '.join(ints[:2])}), which transformers "
                         f"{version}'s tensor-parallel loading cannot load; use transformers >= 5 for --tp, or "
                         "--device-map auto")


def integer_tensors(path: str) -> list[str]:
    """The names of a local folder's safetensors tensors of an integer dtype (beaver's sample count,
    a BatchNorm's num_batches_tracked), from the headers alone."""
    from ..models.weight_files import read_header, safetensors_files

    folder = Path(path).expanduser()
    if not folder.is_dir():
        return []
    try:
        return sorted(n for f in safetensors_files(folder) for n, (dtype, _) in read_header(f).items()
                      if dtype[0] in "IU" or dtype == "BOOL")
    except (OSError, ValueError):
        return []  # loading reports an unreadable file itself


def check_run(o: ScoreOptions, run) -> None:
    """Everything loaded for a run (engine.prepare.Loaded) against the options and each other."""
    check_tp(o, run.config, o.model)
    if run.ref_config is not None:
        check_tp(o, run.ref_config, o.ref_model)
    if run.adapter is not None:
        if o.ref_model is not None or o.ref_free is not None:
            raise UsageError(f"--ref-model / --ref-free are for DPO models; {o.model} is a reward model "
                             f"(adapter {run.adapter.name})")
        if o.tp > 1 and run.adapter.remote_code:
            raise UsageError(f"--tp {o.tp}: the {run.adapter.name} adapter runs the model's own code, which has no "
                             "tensor-parallel plan here; use --device-map auto")
        return
    if o.adapter:
        raise UsageError(f"--adapter {o.adapter} scores reward models, not --mode {o.mode}")
    check_kind(o.model, run.config, run.mode, "model")
    if run.mode == "rm":
        if o.ref_model is not None:
            raise UsageError("--ref-model is for DPO models; the model is a sequence classifier (rm mode)")
        if o.ref_free is not None:
            raise UsageError("--ref-free is for DPO models; the model is a sequence classifier (rm mode)")
        return
    if o.mode == "auto" and o.ref_model is None and o.ref_free is None:
        check_reward_lm(o.model, run.config)
    if run.tokenizer.eos_token_id is None:
        raise UsageError(f"tokenizer {run.tokenizer_path}: has no EOS token, which DPO scoring appends to every "
                         "response")
    if o.ref_model:
        check_reference(o, run)


# A causal LM that is a reward model (Nemotron's reward LMs, read from an LM-head row) looks like a DPO
# policy to mode detection and would be scored reference-free without a word. The signs, kept conservative:
# the model's own name (its last path component, so no test or download folder above it counts) holding
# "reward" or an "rm" word ("-RM", "_rm."), an adapter's official name (at the path's tail), or a config field
# whose name says reward (no stock transformers config has one) or a value head's (GRM's vhead_*). Real
# Nemotron reward configs are stock LlamaConfigs: for them the name is the sign.
RM_WORD = re.compile(r"(^|[-_.])rm($|[-_.])")
VALUE_HEAD_FIELDS = ("vhead_layer_type", "vhead_num_layers", "vhead_num_neurons")


def reward_lm_signs(path: str, config) -> str | None:
    """Why a causal LM given without --ref-model / --ref-free looks like a reward model, or None."""
    from ..adapters import ADAPTERS

    name = path.replace("RewardModels/", "").rstrip("/")
    for a in ADAPTERS:
        if any(name == n or name.endswith("/" + n) for n in a.official_names):
            return f"it is the official {a.name} entry"
    tail = name.rsplit("/", 1)[-1].lower()
    if "reward" in tail or RM_WORD.search(tail):
        return f"its name ({tail}) says reward model"
    keys = config.to_dict() if hasattr(config, "to_dict") else vars(config) if config is not None else {}
    fields = [k for k in keys if "reward" in k.lower() or k in VALUE_HEAD_FIELDS]
    if fields:
        return f"its config has {fields[0]}"
    return None


def check_reward_lm(path: str, config) -> None:
    """A causal LM that looks like a reward model is not scored as a reference-free DPO policy silently."""
    from ..adapters.nemotron import fits

    why = reward_lm_signs(path, config)
    if why is None:
        return
    choices = (["--adapter nemotron-reward (its reward is the logit of token id 0)"] if fits(path) else []) + [
        "--ref-model PATH (DPO rewards against a reference)", "--ref-free {sum,avg,norm} (reference-free DPO rewards)"]
    raise UsageError(f"model {path} is a causal LM but {why}: say how to score it: {'; '.join(choices)}")


def check_reference(o: ScoreOptions, run) -> None:
    check_kind(o.ref_model, run.ref_config, "dpo", "reference model")
    ref_vocab, vocab = getattr(run.ref_config, "vocab_size", None), getattr(run.config, "vocab_size", None)
    if ref_vocab != vocab:
        raise UsageError(f"policy and reference vocabularies differ ({vocab} vs {ref_vocab}): they must share one "
                         "tokenizer")
    if run.ref_tokenizer is not None and run.ref_tokenizer is not run.tokenizer and \
            run.ref_tokenizer.get_vocab() != run.tokenizer.get_vocab():  # (the same files load as the same object)
        raise UsageError(f"policy and reference tokenizers differ ({o.model} vs {o.ref_model}): the reference's "
                         "log-probs must be of the same tokens")


def check_output(o: ScoreOptions, name=cli_name) -> None:
    """Refuse to mix runs: an output folder holding another run's results (different options) is an
    error unless --overwrite. The same command again is fine (it resumes or reuses)."""
    out = Path(o.output)
    run_file, results_file = out / "run.json", out / "results.json"
    if not (run_file.exists() or results_file.exists()) or o.overwrite:
        return
    try:
        before = json.loads(run_file.read_text())["options"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"{name('output', o.output)}: holds results.json of an unknown run; pass "
                         f"{name('overwrite', True)} to replace it") from None
    now = asdict(o)
    changed = [k for k in SCORED_OPTIONS if json.dumps(before.get(k)) != json.dumps(now.get(k))]
    if changed:
        raise UsageError(f"{name('output', o.output)}: holds another run's results (different "
                         f"{', '.join(changed)}); pass {name('overwrite', True)} "
                         "to replace them, or choose another folder")


def context_check(samples, seqs: list[Encoded], config, compat: bool):
    limit = getattr(config, "max_position_embeddings", None)
    if compat or not limit:
        return
    for i, e in enumerate(seqs):
        if len(e.ids) > limit:
            raise UsageError(f"{sequence_name(samples, i)}: {len(e.ids)} tokens exceed the model's context length "
                             f"{limit}; use --compat official to truncate as the official scripts do")
