"""What an in-process judge's generate() calls are given besides the prompt, drawn from the model
folder and the request, and what its store key is made of (request_inputs).

The ids: EOS (every id the generation config names, then the tokenizer's), pad (the tokenizer's,
else the first EOS) and BOS, from the folder's generation_config.json (else its config.json, as
transformers reads them). The generation config in force while generating holds those ids only
(the model's own sampling defaults are set aside). generate() decodes greedily; a sampled request
draws with the seeded sampler (hf_backend.SeededSampler: SAMPLER names its procedure).
"""

from __future__ import annotations

from ..errors import UsageError, one_line

SAMPLER = "seeded-inverse-cdf-v1"  # SeededSampler's procedure, in every sampled request's key: change it with it


def folder_generation_config(path: str, trust_remote_code: bool = False):
    """The generation config transformers gives a model loaded from `path`: its
    generation_config.json, else one made from its config.json."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(path)
    except OSError:  # no generation_config.json
        from ..models.loading import load_config

        return GenerationConfig.from_model_config(load_config(path, trust_remote_code))
    except (ValueError, TypeError) as e:
        raise UsageError(f"judge model {path}: generation_config.json: {one_line(e, 200)}") from None


def generation_settings(generation_config, tokenizer) -> dict:
    """The ids every generate() call gets: EOS (every id the generation config names, then the
    tokenizer's), pad (the tokenizer's, else the first EOS) and BOS (the generation config's)."""
    ids = getattr(generation_config, "eos_token_id", None)
    eos = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.append(tokenizer.eos_token_id)
    eos = [int(t) for t in eos]
    pad = tokenizer.pad_token_id
    bos = getattr(generation_config, "bos_token_id", None)
    return {"eos_token_id": eos, "pad_token_id": (eos[0] if eos else None) if pad is None else int(pad),
            "bos_token_id": bos if bos is None or isinstance(bos, int) else list(bos)}


def neutral_config(settings: dict):
    """The generation config in force while generating: only the ids, no sampling defaults."""
    from transformers import GenerationConfig

    return GenerationConfig(bos_token_id=settings["bos_token_id"], eos_token_id=settings["eos_token_id"],
                            pad_token_id=settings["pad_token_id"])


def config_dict(config) -> dict:
    """A GenerationConfig's values, without the version that wrote it (in the key apart)."""
    d = config.to_dict()
    d.pop("transformers_version", None)
    return d


def generate_kwargs(settings: dict, sampling) -> dict:
    """generate()'s arguments for a batch of requests sharing `sampling`, besides the inputs and the
    seeded sampler (sampler_inputs)."""
    return {"max_new_tokens": sampling.max_tokens, "do_sample": False, "eos_token_id": settings["eos_token_id"],
            "pad_token_id": settings["pad_token_id"]}


def sampler_inputs(sampling) -> dict | None:
    """What the seeded sampler draws with (None: greedy)."""
    if sampling.temperature <= 0:
        return None
    return {"procedure": SAMPLER, "temperature": sampling.temperature, "top_p": sampling.top_p,
            "seed": sampling.seed}


def request_inputs(settings: dict, messages, sampling) -> dict:
    """Everything one request's completion depends on besides the judge's identity (weights,
    tokenizer, chat template, dtype, device, libraries and the generation config in force): its
    messages, generate()'s arguments and the sampler's; the store key is made from it."""
    return {"messages": [dict(m) for m in messages], "generate": generate_kwargs(settings, sampling),
            "sampler": sampler_inputs(sampling)}
