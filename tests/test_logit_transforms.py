"""Every logit transform in the DPO path: for every causal-LM architecture of the installed
transformers that builds tiny offline, the log-probs the DPO scorer computes (the fused head path,
or the model's own logits where the fused head cannot express the model or its self-check finds a
transform it does not know) equal log_softmax(model(...).logits) gathered at the targets (fp32,
1e-4). The architectures whose transforms the fused head knows (Granite's divisor, Cohere's scale,
Gemma's soft-capping) must take the fused path."""

import warnings

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from rmbench_fast.inputs.batching import Batch
from rmbench_fast.scorers import DPOScorer
from rmbench_fast.inputs.tokenize import Encoded

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
            vocab_size=128, max_position_embeddings=64, head_dim=8, num_experts=4, num_local_experts=4,
            n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
            n_shared_experts=1, first_k_dense_replace=0, n_embd=32, n_layer=2, n_head=4, d_model=32, ffn_dim=64,
            encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, n_positions=64, num_layers=2, pad_token_id=0, bos_token_id=1,
            eos_token_id=2)
FUSED = {"llama", "mistral", "qwen2", "granite", "granitemoe", "cohere", "cohere2", "gemma", "gemma2", "gpt2",
         "gpt_neox", "phi", "olmo2", "starcoder2"}
MAX_PARAMS = 5_000_000


def tiny(model_type):
    """A tiny random model of the architecture, or None when the generic small settings do not fit it."""
    cfg = AutoConfig.for_model(model_type)
    for k, v in TINY.items():
        if getattr(cfg, k, None) is not None and not isinstance(getattr(cfg, k), (list, dict)):
            try:
                setattr(cfg, k, v)
            except Exception:
                pass
    if getattr(cfg, "logits_scaling", None) is not None:
        cfg.logits_scaling = 4.0  # a divisor that shows (Granite's default of 1 would hide a missed one)
    if getattr(cfg, "logit_scale", None) is not None:
        cfg.logit_scale = 0.25
    if getattr(cfg, "final_logit_softcapping", None) is not None:
        cfg.final_logit_softcapping = 3.0  # small: the cap bends the tiny model's logits
    with torch.device("meta"):
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
    if n > MAX_PARAMS:
        return None
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # larger head weights: logits far from uniform, so a missed transform shows
        for p in model.parameters():
            p.mul_(4.0 if p.dim() == 2 else 1.0)
    return model


@pytest.mark.parametrize("model_type", sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES))
def test_dpo_logprobs_equal_the_models_own(model_type):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = tiny(model_type)
            ids = torch.randint(3, 120, (1, 14), generator=torch.Generator().manual_seed(1))
            with torch.no_grad():
                # as the official flow runs it: the attention mask given (all ones for one row)
                logits = None if model is None else model(input_ids=ids, attention_mask=torch.ones_like(ids),
                                                          use_cache=False).logits[0].float()
        except Exception as e:  # an architecture the generic tiny settings do not fit
            pytest.skip(f"does not build tiny: {type(e).__name__}: {str(e)[:80]}")
    if model is None:
        pytest.skip("over 5M parameters at the tiny settings")
    seq = Encoded(ids[0].tolist(), start=5)
    scorer = DPOScorer(pad_id=0, impl="torch", ref_free="sum")
    run = scorer.batch_fn(model, torch.device("cpu"))
    out = run([seq], Batch(np.array([0]), len(seq.ids)))
    expected = logits.log_softmax(-1)[torch.arange(4, 13), ids[0, 5:]].double()
    assert out["count"][0] == 9
    np.testing.assert_allclose(out["total"][0], float(expected.sum()), atol=1e-4, rtol=0)
    np.testing.assert_allclose(out["sumsq"][0], float((expected ** 2).sum()), atol=1e-3, rtol=1e-5)
    if model_type in FUSED:
        assert run.info["logprob_head"] == "fused", run.info


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_unknown_two_percent_logit_scale_is_caught(dtype):
    """A model whose forward scales its logits by 1.02 where the fused head cannot see it: the
    self-check refuses the fused head (in half precision too, where a 3e-2 log-prob tolerance let it
    through) and the scores are the model's own."""
    from transformers import LlamaConfig, LlamaForCausalLM

    class Scaled(LlamaForCausalLM):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * 1.02
            return out

    cfg = LlamaConfig(**{k: TINY[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                              "num_key_value_heads", "intermediate_size", "vocab_size",
                                              "max_position_embeddings")})
    torch.manual_seed(0)
    model = Scaled(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0 if p.dim() == 2 else 1.0)
    model = model.to(dtype)
    ids = torch.randint(3, 120, (1, 40), generator=torch.Generator().manual_seed(2))
    seq = Encoded(ids[0].tolist(), start=5)
    run = DPOScorer(pad_id=0, impl="torch", ref_free="sum").batch_fn(model, torch.device("cpu"))
    out = run([seq], Batch(np.array([0]), len(seq.ids)))
    assert run.info["logprob_head"].startswith("model logits: "), run.info
    with torch.no_grad():
        own = model(input_ids=ids).logits[0].float().log_softmax(-1)[torch.arange(4, 39), ids[0, 5:]]
    np.testing.assert_allclose(out["total"][0], float(own.double().sum()), atol=1e-3, rtol=1e-5)
    plain = LlamaForCausalLM(cfg).eval()  # the same weights without the scale: the fused head, in both dtypes
    plain.load_state_dict(model.float().state_dict())
    run = DPOScorer(pad_id=0, impl="torch", ref_free="sum").batch_fn(plain.to(dtype), torch.device("cpu"))
    run([seq], Batch(np.array([0]), len(seq.ids)))
    assert run.info["logprob_head"] == "fused", run.info
