import json
import os
import tempfile
from pathlib import Path

import pytest

# Tests never touch the network: no hub look-ups, whatever the machine can reach.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The result store of every test session starts empty, away from the user's cache.
os.environ["RMBENCH_CACHE"] = tempfile.mkdtemp(prefix="rmbench-test-cache-")
# No GPU in CI: Triton kernels run in the interpreter (must be set before triton.jit decorates them).
os.environ.setdefault("TRITON_INTERPRET", "1")

SHARED = Path(os.environ.get("RMBENCH_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "rm-bench"))


@pytest.fixture
def shared_data():
    """The real RM-Bench files (four domains), read from ../shared/rm-bench, never committed."""
    if not (SHARED / "chat_filtered.json").is_file():
        pytest.skip(f"RM-Bench data not found at {SHARED} (set RMBENCH_DATA)")
    return SHARED


def make_item(i, domain=None, prompt=None):
    item = {
        "id": i,
        "prompt": prompt or f"Question number {i}: what is {i} + {i}?",
        "chosen": [f"{2 * i}.", f"The answer is {2 * i}.", f"**Answer:** {2 * i}"],
        "rejected": [f"{2 * i + 1}.", f"The answer is {2 * i + 1}.", f"**Answer:** {2 * i + 1}"],
        "subset": "toy",
    }
    if domain is not None:
        item["domain"] = domain
    return item


def write_json(path, obj):
    path = Path(path)
    path.write_text(json.dumps(obj))
    return path
