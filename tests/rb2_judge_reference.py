"""rewardbench 0.1.4's own RewardBench 2 judge functions (rewardbench/generative_v2.py, utils.py), run
in the peer environment: what tests/test_judge_benchmarks.py compares rmbench_fast.judges.rb2 with.
Reads one JSON object on stdin, writes one on stdout:

    {"texts": [judge answers], "ratings_rows": [[answers, one a response]],
     "ties": [{"id", "scores", "num_correct"}], "ties_runs": [[{"id", "scores", "num_correct"}]],
     "four_way": {"question", "answers": [4]},
     "rating_prompt": {"question", "completion"}}
    -> {"prompts": {...}, "four_way": [process_judgement of each text], "ratings": [_get_single_rating's
        rating of each text], "rows": [run_judge_ratings_multi's winners ("error" or a list)],
        "rows_value": [run_generative_v2.py's value of each row], "ties_score": process_single_model's,
        "ties_scores": [process_single_model's of each run]}

generative_v2 imports API clients the peer environment does not install (anthropic, google.generativeai,
together, openai): empty stand-ins are put in their place, and its chat_completion is replaced by
one that returns the scripted answer, so that its own parsing and winner code runs on known texts.
"""

from __future__ import annotations

import json
import sys
import types


def stub(name: str, **attrs):
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    sys.modules.setdefault(name, mod)
    return sys.modules[name]


class _Any:
    def __init__(self, *a, **k):
        pass

    def __getattr__(self, name):
        return _Any()


def load():
    import rewardbench.utils  # noqa: F401  (transformers first: it probes for openai's spec)

    for name in ("anthropic", "together", "openai"):
        try:
            __import__(name)
        except ImportError:
            stub(name, Anthropic=_Any, Together=_Any, OpenAI=_Any, APIError=Exception, APIConnectionError=Exception,
                 RateLimitError=Exception, HUMAN_PROMPT="")
    try:
        import google.generativeai  # noqa: F401
    except ImportError:
        genai = stub("google.generativeai", configure=lambda **k: None, GenerativeModel=_Any)
        genai.types = stub("google.generativeai.types", HarmBlockThreshold=_Any(), HarmCategory=_Any())
        import google

        google.generativeai = genai
    from rewardbench import generative_v2

    return generative_v2


def main():
    request = json.loads(sys.stdin.read())
    g = load()
    from datasets import Dataset
    from rewardbench.utils import process_single_model

    answers = {}

    def scripted(model, messages, **kw):
        return answers[messages[-1]["content"]]

    g.chat_completion = scripted
    out = {"four_way": [g.process_judgement(t, None) for t in request.get("texts", [])]}
    model = g.OPENAI_MODEL_LIST[0]
    ratings = []
    for t in request.get("texts", []):
        answers.clear()
        prompt = g.ratings_prompt.format(prompt="q", completion="c")
        answers[prompt] = t
        ratings.append(g._get_single_rating("q", "c", model)[0])
    out["ratings"] = ratings
    rows, values = [], []
    for row in request.get("ratings_rows", []):
        answers.clear()
        msgs = [[{"role": "user", "content": "q"}, {"role": "assistant", "content": f"response {i}"}]
                for i in range(len(row))]
        for i, t in enumerate(row):
            answers[g.ratings_prompt.format(prompt="q", completion=f"response {i}")] = t
        winners, _, info = g.run_judge_ratings_multi("q", msgs, model)
        rows.append(winners)
        # run_generative_v2.py's get_judgement, ratings branch (non-Ties)
        values.append(0.25 if winners == "error" else (0 in winners) / len(winners))
    out["rows"], out["rows_value"] = rows, values
    if request.get("ties"):
        _, score = process_single_model(Dataset.from_list(request["ties"]))
        out["ties_score"] = float(score)
    if request.get("ties_runs"):
        out["ties_scores"] = [float(process_single_model(Dataset.from_list(r))[1]) for r in request["ties_runs"]]
    if "four_way" in request:
        q, a = request["four_way"]["question"], request["four_way"]["answers"]
        conv = [[{"role": "user", "content": q}, {"role": "assistant", "content": x}] for x in a]
        system, user = g.format_judge_answers(q, *conv)
        out["prompts"] = {"four_way": [system, user]}
    if "rating_prompt" in request:
        r = request["rating_prompt"]
        out.setdefault("prompts", {})["ratings"] = g.ratings_prompt.format(prompt=r["question"], completion=r["completion"])
        out["prompts"]["ratings_ties"] = g.ratings_prompt_ties.format(prompt=r["question"], completion=r["completion"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
