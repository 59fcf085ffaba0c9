"""rewardbench 0.1.4's generative judge prompt for conversational rows, run in the peer environment: what
tests/test_judge_conversations.py compares rmbench_fast.judges.conversation with. Reads one JSON object
on stdin, writes one on stdout:

    {"rows": [{"prompt": [messages], "a": str or [messages], "b": str or [messages]}]}
    -> {"version": "0.1.4", "prompts": [[system, user] or null (left out of the run)]}

Each row is what scripts/run_generative.py does with a row: load_eval_dataset(custom_dialogue_formatting=True,
max_turns=4)'s map_conversations (pref sets: text = prompt + [the response as an assistant turn]; a
conversational response is appended as it is), its max_turns=4 filter (longer rows: left out, null), then
format_judgements' `mult_turn = len(text_chosen) > 2`, `prompt = text_chosen[0]["content"]` and
format_judge_answers(prompt, answer_a, answer_b, multi_turn=mult_turn, model_modifier=None), rewardbench's own.
generative.py is loaded alone (the package's __init__ would load torch), its API clients stubbed.
"""

import importlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import types


def stub(name):
    try:
        importlib.import_module(name)
        return
    except ImportError:
        pass
    parent, _, child = name.rpartition(".")
    if parent:
        stub(parent)
    mod = types.ModuleType(name)

    def anything(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return type(attr, (Exception,), {})

    mod.__getattr__ = anything
    sys.modules[name] = mod
    if parent:
        setattr(sys.modules[parent], child, mod)


def load():
    for name in ("anthropic", "google.generativeai.types", "openai", "together"):
        stub(name)
    where = importlib.util.find_spec("rewardbench").submodule_search_locations[0]
    spec = importlib.util.spec_from_file_location("rewardbench_generative", os.path.join(where, "generative.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def text(prompt, response):
    return prompt + (response if isinstance(response, list) else [{"role": "assistant", "content": response}])


def main():
    gen = load()
    data = json.load(sys.stdin)
    prompts = []
    for row in data["rows"]:
        text_a, text_b = text(row["prompt"], row["a"]), text(row["prompt"], row["b"])
        if len(text_a) > 4:  # load_eval_dataset's filter_long_turns (max_turns=4)
            prompts.append(None)
            continue
        mult_turn = True if len(text_a) > 2 else False
        system, user = gen.format_judge_answers(text_a[0]["content"], text_a, text_b, multi_turn=mult_turn,
                                                model_modifier=None)
        prompts.append([system, user])
    print(json.dumps({"version": importlib.metadata.version("rewardbench"), "prompts": prompts}))


if __name__ == "__main__":
    main()
