"""The two-node drill: a real Ray cluster of two nodes on this machine (a head and a second node,
each started with the `ray` command line), joined by `score` and `sweep --engine ray --ray-address`
run as console commands. Their results.json are the same bytes as the local engine's; then the
second node's raylet is killed while one of its workers holds a unit: the run still ends with status
0 and the same bytes, and run.json names the unit redone, the node it was lost on and the node that
finished it. Needs no GPU. Every Ray process started here is stopped (by process id) at the end,
whether the tests passed or not."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray cluster of two nodes and console runs: 80-90 s on 2 cores

from conftest import dpo_checkpoints  # noqa: E402

RAY = str(Path(sys.executable).parent / "ray")
# Every Ray process of the drill, and the console runs joining it: no token authentication (Ray
# turns it on for a head when ~/.ray/auth_token exists, and a joining node does not pick the token
# up), no usage stats, and a node that stops answering is declared dead after about 2 s (3 failed
# checks 0.5 s apart) instead of Ray's default (17 s here). The head's GCS reads these when it starts.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "RAY_health_check_initial_delay_ms": "1000",
           "RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "1000",
           "RAY_health_check_failure_threshold": "3"}
RUN_TIMEOUT = 300  # seconds for one console run; a hang fails the test instead of stalling the session


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def base_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RMBENCH_FAULT_", "RAY_ADDRESS"))}
    return {**env, **RAY_ENV, **extra}


def stop_with_parent():
    """In a child before it runs (`ray start`, console runs): SIGTERM when the test process dies,
    even by SIGKILL (Linux), so that a killed test session leaves no cluster or run behind either."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def session_of(pid: int):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
    return None if fields[0] == "Z" else int(fields[3])


def alive(pid: int) -> bool:
    return session_of(pid) is not None


def processes_in(sessions: set) -> list:
    """Live processes of these sessions: each `ray start` runs in a session of its own, and every
    process it starts (GCS, raylet, agents, workers, which take process groups of their own) stays in
    that session."""
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and session_of(int(p.name)) in sessions:
            pids.append(int(p.name))
    return pids


class Cluster:
    def __init__(self, root: Path):
        self.root = root
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.fault = root / "kill-node2-raylet"  # creating this file arms the fault on the second node
        self.procs = []

    def start_node(self, name: str, args: list, **env):
        """Two nodes on one host: a temp dir each (Ray takes it per node), workers on ports the system
        picks (Ray's default is one range, 10002-19999, per raylet: two raylets on a host could hand
        out the same port), and each node's agent on a port of its own (default 52365 for all)."""
        log = open(self.root / f"{name}.log", "w")
        cmd = [RAY, "start", *args, f"--temp-dir={self.root / name}", "--object-store-memory=80000000",
               "--min-worker-port=0", "--max-worker-port=0", f"--dashboard-agent-listen-port={free_port()}",
               "--include-log-monitor=false", "--disable-usage-stats", "--block"]
        proc = subprocess.Popen(cmd, env=base_env(**env), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=stop_with_parent)
        log.close()
        self.procs.append((name, proc))

    def launch(self):
        """Both nodes at once: the second one's `ray start` waits for the head's GCS."""
        self.start_node("head", ["--head", f"--port={self.port}", "--num-cpus=2", "--include-dashboard=false"])
        self.start_node("node2", [f"--address={self.address}", "--num-cpus=1", '--resources={"node2": 1}'],
                        RMBENCH_FAULT_KILL_RAYLET=str(self.fault))

    def wait_ready(self):
        """Both nodes alive, and which is which (a driver on this host attaches to the head's raylet)."""
        code = f"""if True:
            import json, time, ray
            ray.init(address={self.address!r}, log_to_driver=False)
            deadline = time.time() + 90
            while time.time() < deadline:
                nodes = [n for n in ray.nodes() if n["Alive"]]
                if len(nodes) == 2:
                    break
                time.sleep(0.2)
            find = lambda key: [n["NodeID"] for n in nodes if key in n["Resources"]]
            print(json.dumps({{"head": find("node:__internal_head__"), "node2": find("node2"),
                               "driver": ray.get_runtime_context().get_node_id()}}))
        """
        p = subprocess.run([sys.executable, "-c", code], env=base_env(), capture_output=True, text=True, timeout=150,
                           preexec_fn=stop_with_parent)
        assert p.returncode == 0, self.describe(p.stderr[-4000:])
        ids = json.loads(p.stdout.strip().splitlines()[-1])
        assert len(ids["head"]) == 1 and len(ids["node2"]) == 1, self.describe(ids)
        self.head, self.node2 = ids["head"][0], ids["node2"][0]
        assert self.head != self.node2 and ids["driver"] == self.head

    def describe(self, what) -> str:
        logs = [f"--- {name}.log\n" + (self.root / f"{name}.log").read_text()[-2000:] for name, _ in self.procs]
        return "\n".join([str(what), *logs])

    def stop(self):
        """`ray start --block` stops its node on SIGTERM; whatever is left of its session (a worker
        orphaned by a killed raylet) is killed by process id. Not `ray stop`: it kills every Ray
        process of this user on the machine, other test sessions' included."""
        sessions = {proc.pid for _, proc in self.procs}
        for _, proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.time() + 10
        while (left := processes_in(sessions)) and time.time() < deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        for _, proc in self.procs:
            proc.poll()  # reap
        assert not processes_in(sessions), "Ray processes left behind"


def build_world(root: Path) -> dict:
    """Data, a DPO reference and two checkpoints of a policy."""
    return dpo_checkpoints(root, 3)


def command(name: str, w: dict, out: Path, *args) -> list:
    common = ["--ref-model", w["ref"], "--data", w["data"], "--max-tokens-per-batch", "300", "-q", "--output", str(out)]
    return [sys.executable, "-m", "rmbench_fast", name, *common, *args]


# unshared, as Ray computes by default: a local DPO run shares prompt prefixes by default on the CPU,
# which Ray's units would compute in other batches (within 1e-6, not byte-equal)
def score_args(w: dict) -> list:
    return ["--model", w["ckpts"][0], "--no-share-prefix"]


def sweep_args(w: dict) -> list:
    return [a for ck in w["ckpts"] for a in ("--model", ck)] + ["--no-plots", "--no-share-prefix"]


def cli(name: str, w: dict, out: Path, *args):
    p = subprocess.run(command(name, w, out, *args), env=base_env(), capture_output=True, text=True,
                       timeout=RUN_TIMEOUT, preexec_fn=stop_with_parent)
    assert p.returncode == 0, p.stderr[-4000:]


class Local:
    """The local engine's runs, started in the background while the cluster comes up."""

    def __init__(self, w: dict):
        self.procs = {}
        for name, args in (("score", score_args(w)), ("sweep", sweep_args(w))):
            out = w["root"] / f"local-{name}"
            cmd = command(name, w, out, *args, "--engine", "local", "--cache-dir", str(w["root"] / f"store-{name}"))
            self.procs[name] = (out, subprocess.Popen(cmd, env=base_env(), stdout=subprocess.DEVNULL,
                                                      stderr=subprocess.PIPE, text=True, preexec_fn=stop_with_parent))

    def __getitem__(self, name) -> Path:
        """The output folder of the local run `name`, once it finished well."""
        out, proc = self.procs[name]
        _, err = proc.communicate(timeout=RUN_TIMEOUT)
        assert proc.returncode == 0, err[-4000:]
        return out

    def stop(self):
        for _, proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


@pytest.fixture(scope="module")
def drill(tmp_path_factory):
    # Short paths: Ray puts Unix sockets under --temp-dir, and a socket path has at most 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="rmb2n-", dir="/tmp"))
    c, local = Cluster(root), None
    try:
        c.launch()
        w = build_world(tmp_path_factory.mktemp("two-nodes"))
        local = Local(w)
        c.wait_ready()
        yield c, w, local
    finally:
        if local is not None:
            local.stop()
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


def on_ray(c: Cluster, store: Path) -> list:
    return ["--engine", "ray", "--ray-address", c.address, "--num-workers", "2", "--cache-dir", str(store)]


def test_score_two_nodes_equals_local(drill, tmp_path):
    c, w, local = drill
    cli("score", w, tmp_path / "ray", *score_args(w), *on_ray(c, tmp_path / "store"))
    assert (tmp_path / "ray" / "results.json").read_bytes() == (local["score"] / "results.json").read_bytes()
    run = json.loads((tmp_path / "ray" / "run.json").read_text())
    nodes = set()
    for role in ("model", "ref_model"):
        info = run["models"][role]
        assert info["engine"] == "ray"
        assert sum(info["sequences_per_worker"].values()) == run["n_sequences"]  # each scored once
        nodes.update(info["unit_nodes"].values())
    # Both nodes did work. Not asked of each pass: each pass starts its own workers with SPREAD, which
    # spreads only over nodes with a free CPU at that moment, and the second node's one CPU can still
    # be held by the worker of the pass before (being killed), so a pass may run all on the head.
    assert nodes == {c.head, c.node2}


def test_sweep_two_nodes_equals_local(drill, tmp_path):
    c, w, local = drill
    cli("sweep", w, tmp_path / "ray", *sweep_args(w), *on_ray(c, tmp_path / "store"))
    rows = {d: json.loads((d / "sweep.json").read_text())["checkpoints"] for d in (local["sweep"], tmp_path / "ray")}
    assert len(rows[local["sweep"]]) == 2 and rows[tmp_path / "ray"] == rows[local["sweep"]]
    for row in rows[local["sweep"]]:
        assert (local["sweep"] / row["dir"] / "results.json").read_bytes() == \
            (tmp_path / "ray" / row["dir"] / "results.json").read_bytes()


def test_raylet_killed_mid_run(drill, tmp_path):
    """Last in the module: the second node does not come back."""
    c, w, local = drill
    died = Path(str(c.fault) + ".died")
    c.fault.write_text("armed")
    try:
        cli("score", w, tmp_path / "ray", *score_args(w), *on_ray(c, tmp_path / "store"))
    finally:
        armed = c.fault.exists()
        c.fault.unlink(missing_ok=True)  # never left armed for a later run
    assert not armed and died.exists(), "the fault did not fire: no worker of the second node started a unit"
    dead = json.loads(died.read_text())
    assert dead["node"] == c.node2 and not alive(dead["raylet"])
    assert (tmp_path / "ray" / "results.json").read_bytes() == (local["score"] / "results.json").read_bytes()

    run = json.loads((tmp_path / "ray" / "run.json").read_text())
    lost = []
    for role in ("model", "ref_model"):
        info = run["models"][role]
        assert sum(info["sequences_per_worker"].values()) == run["n_sequences"]  # nothing scored twice
        assert set(info["unit_nodes"]) == set(info["unit_workers"])  # every unit: its process and its node
        assert set(info["unit_nodes"].values()) <= {c.head, c.node2}
        for r in info["retried_units"]:
            assert set(r) >= {"unit", "attempt", "why", "node"}
            if r["node"] == c.node2:
                lost.append(r)
                unit = str(r["unit"])
                assert info["unit_nodes"][unit] == c.head  # taken over on the node still alive
                assert info["unit_workers"][unit] != str(dead["pid"])
    assert lost, f"no retried unit names the dead node {c.node2}"
