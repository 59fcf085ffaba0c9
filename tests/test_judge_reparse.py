"""Reruns into a judge run's own folder: a change of --tie, --invalid, --verdict-regex or of a --seed
that draws only --invalid coins re-parses the stored answers (nothing generated) and replaces the
results without --overwrite; a change that alters the generations is still refused; a --base-url
carrying user:password@ reruns into its own folder, and the password reaches no file."""

import base64
import json

import numpy as np
import pytest
from click.testing import CliRunner

from rmbench_fast.cli.main import main
from rmbench_fast.inputs.data import load_dataset

judge_server = pytest.importorskip("judge_server")
import test_judge as tj  # noqa: E402  (the rule-following judge and its expected cells)


@pytest.fixture
def server():
    tj.need_http()
    s = judge_server.start_thread(reply=tj.reply)
    yield s
    s.stop()


def invoke(server, data_path, out, store, *extra, url=None):
    args = ["judge", "--model", "judge-test", "--base-url", url or server.url, "--data", data_path, "--limit", "2",
            "--output", str(out), "--cache-dir", str(store), "--bootstrap", "0", "-q", *extra]
    return CliRunner().invoke(main, args)


def cells(out):
    return np.array([r["cells"] for r in json.loads((out / "results.json").read_text())])


def test_rule_changes_reparse_in_place(server, data_path, tmp_path):
    out, store = tmp_path / "out", tmp_path / "store"
    first = invoke(server, data_path, out, store)
    assert first.exit_code == 0, first.output
    sent = server.total
    samples = load_dataset(data_path, limit=2)
    for extra, want in ((["--tie", "0.5"], tj.expected_cells(samples, tie=0.5, invalid=0.0)),
                        (["--tie", "0.5", "--invalid", "0.25"], tj.expected_cells(samples, tie=0.5, invalid=0.25)),
                        (["--invalid", "1"], tj.expected_cells(samples, tie=0.0, invalid=1.0))):
        again = invoke(server, data_path, out, store, *extra)
        assert again.exit_code == 0, again.output
        assert server.total == sent  # re-parsed: nothing generated
        assert np.array_equal(cells(out), want), extra
        run = json.loads((out / "run.json").read_text())
        assert run["from_store"] == run["requests"]
    # a regex reading only "significantly better" verdicts: its last match is B>>A in every valid answer
    regex = invoke(server, data_path, out, store, "--verdict-regex", r"\\boxed\{(?P<verdict>[AB])>>[AB]\}")
    assert regex.exit_code == 0, regex.output
    assert json.loads((out / "run.json").read_text())["position_bias"]["first_shown_wins"] == 0.0
    # --seed with both orders and greedy decoding draws only the --invalid coins
    coins = [invoke(server, data_path, out, store, "--invalid", "coin", "--seed", str(seed)) for seed in (1, 2, 1)]
    assert all(c.exit_code == 0 for c in coins), [c.output for c in coins]
    assert server.total == sent


def test_changes_that_alter_the_generations_are_still_refused(server, data_path, tmp_path):
    out, store = tmp_path / "out", tmp_path / "store"
    assert invoke(server, data_path, out, store).exit_code == 0
    before = (out / "results.json").read_text()
    for extra, named in ((["--max-tokens", "100"], "max_tokens"), (["--protocol", "rewardbench"], "protocol"),
                         (["--temperature", "0.5"], "temperature")):
        refused = invoke(server, data_path, out, store, *extra)
        assert refused.exit_code == 2, extra
        assert f"holds another run's results (different {named})" in refused.output, refused.output
    # random orders: the seed draws which order is asked, so it changes the requests
    assert invoke(server, data_path, tmp_path / "r", store, "--orders", "random", "--seed", "1").exit_code == 0
    refused = invoke(server, data_path, tmp_path / "r", store, "--orders", "random", "--seed", "2")
    assert refused.exit_code == 2 and "(different seed)" in refused.output
    # sampling: the seed seeds every request
    assert invoke(server, data_path, tmp_path / "s", store, "--temperature", "0.5", "--seed", "1").exit_code == 0
    refused = invoke(server, data_path, tmp_path / "s", store, "--temperature", "0.5", "--seed", "2")
    assert refused.exit_code == 2 and "(different seed)" in refused.output
    assert (out / "results.json").read_text() == before


def test_a_url_with_credentials_reruns_into_its_own_folder(server, data_path, tmp_path):
    out, store = tmp_path / "out", tmp_path / "store"
    url = server.url.replace("http://", "http://alice:pw-hidden-789@")
    first = invoke(server, data_path, out, store, url=url)
    assert first.exit_code == 0, first.output
    assert json.loads((out / "run.json").read_text())["options"]["base_url"] == server.url
    sent = server.total
    again = invoke(server, data_path, out, store, url=url)
    assert again.exit_code == 0, again.output
    assert server.total == sent
    reparsed = invoke(server, data_path, out, store, "--tie", "0.5", url=url)
    assert reparsed.exit_code == 0, reparsed.output
    # the same server under its plain URL is the same run too; another host is not
    assert invoke(server, data_path, out, store).exit_code == 0
    other = invoke(server, data_path, out, store, url=server.url.replace("127.0.0.1", "localhost"))
    assert other.exit_code == 2 and "(different base_url)" in other.output
    secrets = ("pw-hidden-789", base64.b64encode(b"alice:pw-hidden-789").decode())
    for p in tmp_path.rglob("*"):
        if p.is_file():
            text = p.read_bytes().decode("utf-8", "replace")
            assert not any(s in text for s in secrets), p
    assert not any(s in r.output for r in (first, again, reparsed, other) for s in secrets)
