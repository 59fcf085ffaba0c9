"""`rmbench-fast demo`: the whole flow offline, on tiny random-weight models and a bundled sample."""

from __future__ import annotations

import json
from pathlib import Path

from ..engine.score import ScoreOptions, score
from ..store.paths import cache_root
from ..tiny.models import CHAT_TEMPLATE, build_trio, train_tokenizer

DEMO_DATA = Path(__file__).parent / "demo_data" / "rmbench_demo.json"
DEMO_VERSION = "2"  # bump when the demo models change, so caches rebuild (2: files readable, tiny.models.readable)


def build_demo_models(cache_dir=None) -> dict:
    """A reward model and a DPO policy/reference pair sharing one tokenizer (with a chat template),
    built once under the cache folder."""
    dest = (Path(cache_dir) if cache_dir else cache_root()) / f"demo-models-v{DEMO_VERSION}"
    if (dest / "COMPLETE").is_file():
        return build_trio(dest, None)
    items = json.loads(DEMO_DATA.read_text(encoding="utf-8"))
    texts = [x["prompt"] for x in items] + [r for x in items for r in x["chosen"] + x["rejected"]]
    tok = train_tokenizer(texts, vocab_size=600, chat_template=CHAT_TEMPLATE)
    return build_trio(dest, tok, hidden=128, layers=2, heads=4)


def run_demo(output, cache_dir=None, progress=True, echo=print, print_run=None):
    models = build_demo_models(cache_dir)
    out = Path(output)
    echo(f"demo models (random weights) in {models['rm'].parent}")
    echo(f"data: {DEMO_DATA} (12 prompts over the five domains; not RM-Bench's own data)\n")
    runs = [
        ("RM mode (sequence classifier)", "rm", dict(model=str(models["rm"]))),
        ("DPO mode (policy vs reference)", "dpo", dict(model=str(models["policy"]), ref_model=str(models["reference"]))),
    ]
    for title, name, kw in runs:
        echo(f"== {title}")
        result = score(ScoreOptions(data=str(DEMO_DATA), output=str(out / name), device="cpu", progress=progress,
                                    overwrite=True, cache=False, **kw))  # always measured, never from the store
        if print_run is not None:
            print_run(result.run, result.summary, str(out / name))
        echo("")
    echo("These models have random weights: accuracies near 50% are what chance gives. Score a real model with\n"
         "  rmbench-fast score --model PATH_OR_HUB_ID --data PATH_OR_HUB_ID --output DIR")
