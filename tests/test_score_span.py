"""`--score-span after:TEXT` (inputs.spans): DPO sums the log-probs of the tokens after the last TEXT
with the reasoning kept as context, a reward model reads the response with everything up to TEXT
removed; a response without TEXT is scored whole and counted; the span enters the store's keys. Each
against a naive reference written here: a per-sequence loop of log_softmax gathers over the span."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from rmbench_fast.cli.main import main
from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.errors import UsageError
from rmbench_fast.inputs.spans import after, first_token_after, parse
from rmbench_fast.tiny.models import build_trio, train_tokenizer

TEMPLATE = "{{ bos_token }}{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}"
THINK = "</think>"
ROWS = [("what is two and two", "<think>two and two, so four, maybe five</think>\n\nThe answer is four.",
         "<think>hmm</think> five, I think</think>Five."),
        ("name a colour", "Blue, plainly.", "<think>colours: red green</think>Red is a colour"),
        ("say hi", "<think>greet</think>", "hello there<think>no</think> hi!")]


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    corpus = [p + " " + c + " " + r for p, c, r in ROWS] * 4
    tok = train_tokenizer(corpus, vocab_size=300, chat_template=TEMPLATE)
    return build_trio(tmp_path_factory.mktemp("span"), tok, seeds=(4, 5, 6), hidden=16, layers=1, heads=2)


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p, "chosen": c, "rejected": r}) for p, c, r in ROWS) + "\n")
    return str(path)


def naive_span_logps(model_dir, prompt, response, text):
    """sum log p over the tokens from the first one that ends after the response's last TEXT (all of the
    response when it has none) to the EOS, one sequence at a time, the whole model's logits."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    msgs = [{"role": "user", "content": prompt}]
    p_text = tok.apply_chat_template(msgs, tokenize=False)
    full = tok.apply_chat_template(msgs + [{"role": "assistant", "content": response}], tokenize=False)
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    ids = [tok.bos_token_id] + enc["input_ids"] + [tok.eos_token_id]
    answer = full[len(p_text):]
    if text in response:
        char = len(p_text) + answer.rfind(text) + len(text)
        first = next((k for k, (_, end) in enumerate(enc["offset_mapping"]) if end > char), len(enc["input_ids"]))
    else:
        first = len(tok(p_text, add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        logps = model(input_ids=torch.tensor([ids])).logits[0].log_softmax(-1)
    return sum(float(logps[t - 1, ids[t]]) for t in range(first + 1, len(ids)))


def test_parse_and_cut():
    assert parse(None) is None and parse("after:</think>") == "</think>" and parse("after::") == ":"
    for bad in ("</think>", "after:", "before:x"):
        with pytest.raises(UsageError, match="after:TEXT"):
            parse(bad)
    assert after("a</think>b</think> c", THINK) == " c" and after("none", THINK) == "none"
    assert after([{"role": "assistant", "content": "x</think>y"}], THINK) == [{"role": "assistant", "content": "y"}]
    # a token straddling the end of TEXT (chars 3..6 over the end at 5) is scored; one ending there is not
    assert first_token_after([(0, 3), (3, 6), (6, 9)], 5) == 1 and first_token_after([(0, 5), (5, 9)], 5) == 1
    assert first_token_after([(0, 5)], 5) == 1


def test_dpo_span_equals_the_naive_sum_and_counts_responses_without_text(trio, data, tmp_path):
    run = score(ScoreOptions(model=str(trio["policy"]), ref_model=str(trio["reference"]), data=data, benchmark="pairs",
                             score_span="after:" + THINK, bootstrap=0, progress=False, cache=False,
                             output=str(tmp_path / "out")))
    for (p, c, r), got_c, got_r in zip(ROWS, run.chosen, run.rejected):
        for resp, got in ((c, got_c[0]), (r, got_r[0])):
            want = (naive_span_logps(str(trio["policy"]), p, resp, THINK)
                    - naive_span_logps(str(trio["reference"]), p, resp, THINK))
            assert abs(got - want) <= 1e-4, resp
    info = json.loads((tmp_path / "out" / "run.json").read_text())["score_span"]
    assert info["after"] == THINK and info["responses"] == 6 and info["without_text"] == 1
    assert info["sequences_without_scored_tokens"] == 0
    # the whole response, as without a span, for the response without TEXT; fewer tokens for the others
    whole = score(ScoreOptions(model=str(trio["policy"]), ref_model=str(trio["reference"]), data=data,
                               benchmark="pairs", bootstrap=0, progress=False, cache=False))
    assert abs(whole.chosen[1][0] - run.chosen[1][0]) <= 1e-5
    assert whole.run["score_span"] is None
    assert run.run["sequences"]["scored_tokens"] < whole.run["sequences"]["scored_tokens"]


def test_rm_span_reads_the_response_after_text(trio, data):
    run = score(ScoreOptions(model=str(trio["rm"]), data=data, benchmark="pairs", score_span="after:" + THINK,
                             bootstrap=0, progress=False, cache=False))
    tok = AutoTokenizer.from_pretrained(str(trio["rm"]))
    model = AutoModelForSequenceClassification.from_pretrained(str(trio["rm"])).eval()
    model.config.pad_token_id = tok.eos_token_id
    for (p, c, r), got_c, got_r in zip(ROWS, run.chosen, run.rejected):
        for resp, got in ((c, got_c[0]), (r, got_r[0])):
            cut = resp.split(THINK)[-1]  # everything up to and including the last TEXT removed
            text = tok.apply_chat_template([{"role": "user", "content": p}, {"role": "assistant", "content": cut}],
                                           tokenize=False)
            ids = tok(text)["input_ids"]
            mask = [0 if k == 0 and ids[0] == ids[1] == tok.bos_token_id else 1 for k in range(len(ids))]
            with torch.no_grad():
                want = model(input_ids=torch.tensor([ids]), attention_mask=torch.tensor([mask])).logits[0, 0].item()
            assert abs(got - want) <= 1e-4
    assert run.run["score_span"]["without_text"] == 1


@pytest.mark.parametrize("kind", ["rm", "dpo"])
def test_a_span_run_is_never_served_a_run_without(trio, data, tmp_path, kind):
    kw = (dict(model=str(trio["rm"])) if kind == "rm" else
          dict(model=str(trio["policy"]), ref_model=str(trio["reference"])))
    base = dict(**kw, data=data, benchmark="pairs", bootstrap=0, progress=False, cache_dir=str(tmp_path / "store"))
    plain = score(ScoreOptions(**base))
    spanned = score(ScoreOptions(**base, score_span="after:" + THINK))
    fresh = score(ScoreOptions(**{**base, "cache": False}, score_span="after:" + THINK))
    assert not spanned.run["cache"]["tokenized_from_cache"]
    np.testing.assert_array_equal(np.concatenate(spanned.chosen), np.concatenate(fresh.chosen))
    assert not np.allclose(np.concatenate(spanned.chosen), np.concatenate(plain.chosen))
    again = score(ScoreOptions(**base, score_span="after:" + THINK))  # and the span run is its own store entry
    assert again.run["cache"]["tokenized_from_cache"]
    np.testing.assert_array_equal(np.concatenate(again.rejected), np.concatenate(fresh.rejected))


def test_rm_bench_with_a_span_scores_as_without_when_no_response_has_text(trio, data_path, tmp_path):
    """RM-Bench's responses hold no </think>: every one is scored whole (the same numbers), each counted;
    the output folder of a run without a span is another run's."""
    kw = dict(model=str(trio["policy"]), ref_model=str(trio["reference"]), data=data_path, limit=1, bootstrap=0,
              progress=False, cache=False, domains=("chat",))
    plain = score(ScoreOptions(**kw, output=str(tmp_path / "out")))
    spanned = score(ScoreOptions(**kw, score_span="after:" + THINK))
    np.testing.assert_array_equal(spanned.chosen, plain.chosen)
    assert spanned.run["score_span"]["without_text"] == spanned.run["score_span"]["responses"] == 6
    with pytest.raises(UsageError, match="score_span"):
        score(ScoreOptions(**kw, score_span="after:" + THINK, output=str(tmp_path / "out")))


def test_the_command_line_checks_the_span(trio, data):
    out = CliRunner().invoke(main, ["score", "--model", str(trio["rm"]), "--data", data, "--score-span", "</think>"])
    assert out.exit_code != 0 and "after:TEXT" in out.output
