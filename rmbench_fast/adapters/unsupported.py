"""Official entries rmbench-fast does not score: they compare two responses (or generate a
verdict) instead of scoring one, or need images and a hub-bound head. Selecting one is a one-line
error saying so, rather than a wrong number from the plain sequence-classifier path."""

from __future__ import annotations

from functools import partial

from .base import Adapter, OutOfScope

PAIRWISE = {
    "llm-blender/PairRM-hf": "PairRM, a DeBERTa pair ranker (PairRMPipeline)",
    "mightbe/Better-PairRM": "Better-PairRM, a DeBERTa pair ranker (BetterPairRMPipeline)",
    "stanfordnlp/SteamSHP-flan-t5-xl": "SteamSHP, a T5 that generates which response is better (SHPPipeline)",
    "stanfordnlp/SteamSHP-flan-t5-large": "SteamSHP, a T5 that generates which response is better (SHPPipeline)",
    "RLHFlow/pair-preference-model-LLaMA3-8B": "a SLiC pair-preference LM that generates which response is better "
                                               "(SlicPairPMPipeline)",
}
VISION = {"Skywork/Skywork-VL-Reward-7B": "Skywork-VL-Reward, a vision-language model whose value head the official "
                                          "pipeline downloads from the hub (SkyVLPipeline)"}


def refuse(kind: str, o, config, tokenizer, device, tokenizer_path):
    what = {**PAIRWISE, **VISION}.get(o.model.replace("RewardModels/", ""), f"a {kind} model")
    if kind == "pairwise":
        raise OutOfScope(f"model {o.model}: {what} compares two responses rather than scoring one; rmbench-fast "
                         "scores single responses, so pairwise entries are out of scope")
    raise OutOfScope(f"model {o.model}: {what}; vision-language reward models are out of scope for rmbench-fast")


ADAPTERS = [
    Adapter(name="pairwise", summary="pairwise and generative judges (PairRM, Better-PairRM, SteamSHP, SLiC "
            "pair-preference): out of scope, selecting one is an error",
            official_names=tuple(PAIRWISE), architectures=("DebertaV2PairRM",), make_scorer=partial(refuse, "pairwise"),
            notes=("RM-Bench's run_rm.py raises NotImplementedError for these (Custom Classifier entries)",)),
    Adapter(name="vision-language", summary="Skywork-VL-Reward: out of scope (vision-language, hub-bound value head), "
            "selecting it is an error", official_names=tuple(VISION), make_scorer=partial(refuse, "vision-language")),
]
