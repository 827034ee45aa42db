"""Issue 40: bad input, round 3. A run's own folder is written by the user's script, its ranks and,
under ``train --in-image``, whatever the image runs: every file torchdeck reads back from it
(``launch.json``, ``status.json``, ``pid.json``, ``exit.json``, ``cancel``, the metric files, the
digest) and every logger file a run writes is input, read through the one file gate
(``trainer/regular_files.py``, ``backends/files.py``) into typed records
(``backends/run_records.py``, ``backends/schema.py``). Each case ends in one line, or is handled
with nothing lost; none is a traceback, a hang or a process signalled that torchdeck did not start."""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchdeck.backends.base import JobState
from torchdeck.backends.engine import Engine
from torchdeck.backends.errors import SpecError
from torchdeck.backends.events import parse_metric_lines
from torchdeck.backends.local import LocalBackend
from torchdeck.backends.local_image import serve_wheels
from torchdeck.backends.local_in_image import in_image_command, prepare_in_image
from torchdeck.backends.spec import spec_from_dict, validate
from torchdeck.cli.main import main
from torchdeck.terminal import as_shown, printable
from torchdeck.trainer.logfiles import LoggerFiles
from torchdeck.tui.messages import RunsListed

GOOD = "good-1125-000000"
BAD = "bad-1125-000001"
RECORDS = ("launch.json", "status.json", "pid.json", "exit.json", "cancel")
FIELDS = (
    "run_id", "name", "cmd", "env", "cwd", "port", "submitted_at", "world_size", "host", "in_image", "budget",
    "price_per_hour", "node_price_per_hour", "token", "pid", "create_time", "exit_code", "finished_at", "signals",
    "reaped", "requested_at", "spent", "state", "reason", "hint", "ranks", "cost", "queue", "loss", "step", "rank",
)  # fmt: skip


def planted(state: Path, run_id: str) -> Path:
    """An ended run's folder as the launcher leaves it: its launch and exit records and two ranks'
    metric lines (no kept status: it is worked out, and kept, when read)."""
    run = state / "runs" / run_id
    (run / "metrics").mkdir(parents=True)
    now = time.time()
    launch = {"run_id": run_id, "name": run_id.split("-")[0], "cmd": ["x"], "env": {}, "cwd": "/", "port": 1,
              "submitted_at": now - 60, "world_size": 2, "host": "here", "price_per_hour": 0.4, "token": "t"}  # fmt: skip
    (run / "launch.json").write_text(json.dumps(launch))
    (run / "exit.json").write_text(json.dumps({"exit_code": 0, "finished_at": now - 1, "signals": []}))
    for rank in (0, 1):
        lines = [{"schema": 1, "event": "start", "rank": rank, "time": now - 50, "total_steps": 2}]
        lines += [{"schema": 1, "event": "step", "rank": rank, "time": now - 40 + s, "step": s, "loss": 1.0 / s}
                  for s in (1, 2)]  # fmt: skip
        lines.append({"schema": 1, "event": "done", "rank": rank, "time": now - 2})
        (run / "metrics" / f"rank-{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run


def strict(text: str) -> Any:
    """JSON as a strict parser (jq, a browser's) reads it: no NaN, no Infinity."""

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


def cli(state: Path, capsys, *argv: str, limit: float = 60.0) -> tuple[int, str, str]:
    """``torchdeck ARGV`` in this process, with its state in ``state``: (exit, stdout, stderr). It
    must end within ``limit`` seconds: a FIFO read blocking would hang it."""
    result: dict[str, int] = {}

    def call() -> None:
        try:
            result["code"] = main(list(argv))
        except SystemExit as exc:
            result["code"] = exc.code if isinstance(exc.code, int) else 2

    os.environ["TORCHDECK_STATE_DIR"] = str(state)
    try:
        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        thread.join(limit)
        assert not thread.is_alive(), f"torchdeck {' '.join(argv)} still running after {limit} s"
    finally:
        os.environ.pop("TORCHDECK_STATE_DIR")
    out, err = capsys.readouterr()
    return result["code"], out, err


# -- records of any JSON ----------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**60), max_value=10**60) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=4), inner),
    max_leaves=12,
)
records = st.dictionaries(st.sampled_from(FIELDS), json_values) | json_values


@settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(name=st.sampled_from(RECORDS), value=records)
def test_any_json_in_any_run_record_is_a_row_never_a_traceback(tmp_path_factory, capsys, name: str, value: Any) -> None:
    """Through what ``jobs`` and the console's runs screen read (``list``, then the screen's message),
    ``status`` and ``compare``."""
    state = tmp_path_factory.mktemp("state")
    planted(state, GOOD)
    bad = planted(state, BAD)
    (bad / name).write_text(json.dumps(value))  # NaN and Infinity included, as Python writes them
    backend = LocalBackend(state)
    rows = {s.run_id: s for s in backend.list()}
    assert set(rows) == {GOOD, BAD}  # one bad run hides no other
    assert rows[GOOD].state is JobState.SUCCEEDED and rows[GOOD].step == 2
    for status in rows.values():
        for number in (status.submitted_at, status.loss, status.finished_at):
            assert number is None or math.isfinite(number)
        strict(json.dumps(status.to_dict(), allow_nan=True).replace("NaN", "null"))  # fields typed
    shown = backend.status(BAD)  # a record that is no record: a status saying so, naming the file
    assert shown.run_id == BAD and isinstance(shown.reason, str) and isinstance(shown.world_size, int)
    assert shown.state is not JobState.UNKNOWN or (name in shown.reason and "\n" not in shown.reason)
    listed = RunsListed(list(rows.values()))  # what the console's runs screen is handed
    assert {s.run_id for s in listed.statuses} == {GOOD, BAD}
    code, out, err = cli(state, capsys, "compare", GOOD, BAD, "--output", "json")
    assert code == 0 and [r["run_id"] for r in strict(out)["runs"]] == [GOOD, BAD], err


@pytest.mark.parametrize("name", RECORDS)
@pytest.mark.parametrize(
    "poison",
    ["[1]", '{"budget": "abc", "spent": "x"}', '{"reason": 5, "submitted_at": "x", "pid": "x", "state": "failed"}',
     '{"submitted_at": 1e309, "exit_code": 1e400, "world_size": -1, "run_id": "bad-1125-000001", "state": "nope"}',
     "NaN", "not json", '{"a": ' * 100 + "1" + "}" * 100],
)  # fmt: skip
def test_a_poisoned_record_is_one_row_in_jobs_status_and_compare(tmp_path, capsys, name: str, poison: str) -> None:
    """Issue 40 row 2: the records of the wrong type that traced back through ``jobs``, ``jobs
    --output json``, ``status`` and ``compare``, and hid every other run."""
    state = tmp_path / "state"
    planted(state, GOOD)
    (planted(state, BAD) / name).write_text(poison)
    code, out, err = cli(state, capsys, "jobs")
    assert code == 0 and GOOD in out and BAD in out and "Traceback" not in err, err
    code, out, err = cli(state, capsys, "jobs", "--output", "json")
    assert code == 0 and {r["run_id"] for r in strict(out)} == {GOOD, BAD}, err
    code, out, err = cli(state, capsys, "status", BAD, "--output", "json")
    assert code == 0 and strict(out)["run_id"] == BAD, err
    code, out, err = cli(state, capsys, "compare", GOOD, BAD, "--output", "json")
    assert code == 0 and [r["run_id"] for r in strict(out)["runs"]] == [GOOD, BAD], err


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def link_to_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def make_folder(path: Path) -> None:
    path.mkdir()


def make_socket(path: Path) -> None:
    """A socket file, as a crashed server leaves one (bound at a short path: AF_UNIX paths are short)."""
    import tempfile

    short = Path(tempfile.mkdtemp(dir="/tmp")) / "s"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(short))
    os.rename(short, path)
    short.parent.rmdir()


@pytest.mark.parametrize("kind", [make_fifo, link_to_zero, make_folder, make_socket], ids=lambda k: k.__name__)
@pytest.mark.parametrize("name", [*RECORDS, "metrics/rank-0.jsonl", "digest.json"])
def test_a_run_file_that_is_no_file_is_passed_over_never_read(tmp_path, capsys, kind: Callable, name: str) -> None:
    """Issue 40 row 1: a FIFO hung ``jobs`` and left the console on "reading runs..."; a link to
    /dev/zero read 1.9 GB and died of MemoryError."""
    state = tmp_path / "state"
    planted(state, GOOD)
    bad = planted(state, BAD)
    (bad / name).unlink(missing_ok=True)
    kind(bad / name)
    for argv in (["jobs"], ["jobs", "--output", "json"], ["status", BAD], ["compare", GOOD, BAD, "--output", "json"]):
        code, out, err = cli(state, capsys, *argv, limit=30)
        assert code == 0 and "Traceback" not in err and "MemoryError" not in err, (argv, err)
        assert BAD in out and (GOOD in out or argv[0] == "status"), (argv, out)


def test_non_finite_numbers_in_a_kept_status_print_as_null(tmp_path, capsys) -> None:
    """Issue 40 row 4: NaN and 1e999 in a kept status.json (its cost lines too) printed as NaN and
    Infinity, which jq and every strict parser refuse whole."""
    state = tmp_path / "state"
    run = planted(state, BAD)
    kept = {"run_id": BAD, "name": "bad", "backend": "local", "state": "failed", "world_size": 2, "submitted_at": 1.0,
            "loss": float("nan"), "val_loss": float("inf"), "ranks": [{"rank": 0, "loss": float("nan"), "step": 3}],
            "cost": {"amount": float("inf"), "budget": None, "running": False,
                     "lines": [{"what": "m", "node_hours": 1e999, "per_hour": float("nan"), "source": "s"}]}}  # fmt: skip
    (run / "status.json").write_text(json.dumps(kept))
    for argv in (["status", BAD, "--output", "json"], ["jobs", "--output", "json"]):
        code, out, err = cli(state, capsys, *argv)
        assert code == 0, err
        shown = strict(out)
        shown = shown[0] if isinstance(shown, list) else shown
        assert shown["loss"] is None and shown["state"] == "failed" and shown["ranks"][0]["step"] == 3


def test_the_sanitiser_shows_bidi_and_zero_width_characters_escaped(tmp_path, capsys) -> None:
    """Issue 40 row 13: U+202E made a reason read backwards on a bidi terminal; U+200B hid in a name."""
    hostile = "job \u202edeliaf\u202c ok\u200b\u2066x\u2069\ufeff"
    for shown in (printable(hostile), as_shown(hostile)):
        assert not any(c in shown for c in "\u202e\u202c\u200b\u2066\u2069\ufeff")
        assert "\\u202e" in shown and "\\u200b" in shown
    state = tmp_path / "state"
    run = planted(state, BAD)
    kept = {"run_id": BAD, "name": "bad", "backend": "local", "state": "failed", "world_size": 2,
            "submitted_at": 1.0, "reason": f"RuntimeError: {hostile}"}  # fmt: skip
    (run / "status.json").write_text(json.dumps(kept))
    for argv in (["jobs"], ["status", BAD]):
        code, out, _ = cli(state, capsys, *argv)
        assert code == 0 and "\u202e" not in out and "\\u202e" in out


# -- metric lines --------------------------------------------------------------------------------


def test_a_metric_lines_figures_of_the_wrong_type_are_dropped_once_where_it_is_read() -> None:
    lines = [
        b'{"schema":1,"event":"step","rank":0,"time":1,"step":"x","loss":[1],"epoch":true,"samples_per_s":"fast"}',
        b'{"schema":1,"event":"error","rank":1,"time":"soon","message":["a"]}',
        b'{"schema":1,"event":"error","rank":2,"time":2,"message":{"a":1},"hint":5}',
        b'{"schema":1,"event":["step"],"rank":0,"time":1}',
        b'{"schema":1,"event":"step","rank":"0","time":1,"step":1}',
        b'{"schema":1,"event":"step","rank":1e300,"time":1,"step":1}',
        b'{"schema":1,"event":"step","rank":0,"time":1,"step":4,"loss":0.5}',
    ]
    events = parse_metric_lines(lines)
    assert [(e.event, e.rank) for e in events] == [("step", 0), ("error", 2), ("step", 0)]
    assert events[0].record.keys() == {"schema", "event", "rank", "time"}
    assert events[1].record["message"] == "{'a': 1}" and events[1].record["hint"] == "5"
    assert events[2].record["step"] == 4


# -- stop proves whom it signals -----------------------------------------------------------------


def test_stop_signals_no_process_that_a_planted_pid_file_names(tmp_path, capsys) -> None:
    """Issue 40 row 3 (high): a pid.json naming any process-group leader of the user (its create_time
    copied from /proc, or left out) had that whole group killed, and ``stop`` said "every process has
    ended". Now a process is signalled only where /proc shows it is the run's own launcher."""
    import subprocess

    import psutil

    victim = subprocess.Popen(["sleep", "600"], start_new_session=True)  # a group leader of this user
    try:
        state = tmp_path / "state"
        run = planted(state, BAD)
        (run / "exit.json").unlink()  # a run still going, as far as its files say
        created = psutil.Process(victim.pid).create_time()
        for claim in ({"pid": victim.pid, "create_time": created}, {"pid": victim.pid}, {"pid": os.getpid()}):
            (run / "pid.json").write_text(json.dumps(claim))
            code, out, err = cli(state, capsys, "status", BAD)
            assert code == 0 and f"names process {claim['pid']}" in out and "not this run's launcher" in out, out
            code, out, err = cli(state, capsys, "stop", BAD)
            assert code == 0 and f"pid.json names process {claim['pid']}" in err, err
            assert victim.poll() is None, "the planted pid's group was signalled"
            (run / "cancel").unlink(missing_ok=True)
            (run / "exit.json").unlink(missing_ok=True)
            (run / "status.json").unlink(missing_ok=True)
    finally:
        victim.kill()
        victim.wait()


# -- logger files --------------------------------------------------------------------------------


def follower(root: Path) -> LoggerFiles:
    return LoggerFiles(str(root), since=0)


def test_a_logger_file_no_reader_can_follow_is_left_with_one_note_and_the_rest_still_read(tmp_path) -> None:
    """Issue 40 rows 5 and 6: a trainer_state.json nested 200,000 deep raised RecursionError out of the
    reader (the rank wrapper died, and a working script ended with exit code 1); an mlflow.db whose
    ``metrics`` is a view over an endless query never returned (the script blocked on its pipe)."""
    logs = follower(tmp_path)  # the files come after it, as a run's loggers write them
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "trainer_state.json").write_text(
        '{"log_history": [{"loss": ' + "[" * 200_000 + "]" * 200_000 + ', "step": 1}]}'
    )
    db = sqlite3.connect(tmp_path / "mlflow.db")
    db.execute(
        "CREATE VIEW metrics AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n)"
        " SELECT x AS key, x AS value, x AS step, x AS timestamp, 0 AS is_nan FROM n"
    )
    db.commit()
    db.close()
    os.mkfifo(tmp_path / "metrics.csv")
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "trainer_state.json").write_text(
        json.dumps({"log_history": [{"loss": 0.5, "step": 3}], "max_steps": 9})
    )
    began = time.monotonic()
    records = logs.poll()
    took = time.monotonic() - began
    assert [(r["step"], r["loss"], r["total_steps"]) for r in records] == [(3, 0.5, 9)]
    notes = logs.take_notes().decode()
    assert "deep/trainer_state.json" in notes and "mlflow.db" in notes and "metrics.csv" in notes, notes
    assert len(notes.splitlines()) == 3 and took < 30
    assert logs.poll() == [] and logs.take_notes() == b""  # left: said once


def test_a_large_trainer_state_is_read_whole_then_only_what_it_adds(tmp_path) -> None:
    """Issue 40 row 7: a 21 MB trainer_state.json (a long run logging every step) was cut at 8 MiB,
    failed to parse and gave nothing, silently, at every poll."""
    path = tmp_path / "trainer_state.json"
    logs = follower(tmp_path)
    history = [{"loss": 1.0 / (s + 1), "learning_rate": 1e-4, "grad_norm": 0.5, "epoch": s / 60000, "step": s,
                "note": "x" * 250} for s in range(1, 60001)]  # fmt: skip
    path.write_text(json.dumps({"log_history": history, "max_steps": 70000}, indent=2))
    assert path.stat().st_size > 20 << 20
    steps = [r["step"] for r in logs.poll() if r["event"] == "step"]
    assert steps == list(range(1, 60001))
    history.append({"loss": 0.01, "step": 60001})
    path.write_text(json.dumps({"log_history": history, "max_steps": 70000}, indent=2))
    assert [(r["step"], r["loss"], r["total_steps"]) for r in logs.poll()] == [(60001, 0.01, 70000)]


# -- the exit mark ---------------------------------------------------------------------------------


def run_rank(tmp_path: Path, script: str, env: dict[str, str] | None = None) -> tuple[int, list[dict[str, Any]]]:
    """One rank of ``script`` under the local rank wrapper (no torchrun: RANK 0 of 1)."""
    import subprocess
    import sys

    (tmp_path / "train.py").write_text(script)
    metrics = tmp_path / "rank-0.jsonl"
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    done = subprocess.run(
        [sys.executable, "-m", "torchdeck.backends.rank_output", str(metrics), "", "--",
         sys.executable, "-u", "train.py"],
        cwd=tmp_path, env={**base, "RANK": "0", "WORLD_SIZE": "1", **(env or {})}, capture_output=True, timeout=60,
    )  # fmt: skip
    return done.returncode, [json.loads(line) for line in metrics.read_text().splitlines()]


ABORT_AFTER_EXIT = """
import os, sys
class GlooThreads:  # as PyTorch's gloo threads do, now and then: abort once the interpreter tears down
    def __del__(self, os=os, sys=sys):
        print("terminate called without an active exception", file=sys.stderr, flush=True)
        os.abort()
threads = GlooThreads()  # a silent rank (Lightning's rank 1): only the exit mark says it got to its end
"""


def test_a_sitecustomize_of_the_users_own_cannot_hide_the_exit_mark(tmp_path) -> None:
    """Issue 40 row 8: coverage's subprocess hook or a project's own sitecustomize.py on the script's
    PYTHONPATH hid torchdeck's: the same script was done without one and failed with one."""
    code, records = run_rank(tmp_path, ABORT_AFTER_EXIT)
    assert code == 0 and records[-1]["event"] == "done"  # the mark said it reached its exit
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nopen(os.environ['SEEN'], 'w').write('ran')\n")
    code, records = run_rank(tmp_path, ABORT_AFTER_EXIT, {"PYTHONPATH": str(own), "SEEN": str(tmp_path / "seen")})
    assert code == 0 and records[-1]["event"] == "done"
    assert (tmp_path / "seen").read_text() == "ran"  # the user's own still ran, after torchdeck's


def test_a_forked_child_cannot_say_that_its_rank_reached_its_exit(tmp_path) -> None:
    """Issue 40 row 9: a helper the script forked inherited the mark's atexit handler and pipe, and
    its normal exit made a rank that aborted at step 1 of 100 a ``done`` one."""
    script = """
import os, sys, time
print("step 1/100 loss 0.5", flush=True)
if os.fork() == 0:
    sys.exit(0)  # the helper ends normally: its atexit handlers run
os.wait()
print("terminate called without an active exception", file=sys.stderr, flush=True)
os.abort()  # the rank itself dies at step 1, far from its exit
"""
    code, records = run_rank(tmp_path, script)
    assert code != 0 and records[-1]["event"] != "done"


# -- images --------------------------------------------------------------------------------------


def test_the_wheel_server_serves_the_folders_wheels_and_nothing_else(tmp_path) -> None:
    """Issue 40 row 10: ``--torch-wheels DIR`` was a plain directory handler: a listing, dotfiles,
    any file, and whatever a link in the folder pointed at. (Issue 41: every wheel of the folder is
    served, torch's dependencies too, since the build then asks no index.)"""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = wheels / "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"PK wheel")
    numpy = wheels / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl"
    numpy.write_bytes(b"PK numpy")
    (wheels / ".netrc").write_text("machine x password y")
    (wheels / "notes.txt").write_text("private")
    (wheels / "torch-9.9.9-py3-none-any.whl").symlink_to("/etc/passwd")
    (tmp_path / "outside.whl").write_text("out")
    with serve_wheels(str(wheels)) as url:
        assert url is not None
        page = urllib.request.urlopen(url, timeout=10).read().decode()
        assert wheel.name in page and ".netrc" not in page and "notes" not in page and "9.9.9" not in page
        assert urllib.request.urlopen(url + wheel.name, timeout=10).read() == b"PK wheel"
        assert numpy.name in page and urllib.request.urlopen(url + numpy.name, timeout=10).read() == b"PK numpy"
        for path in (".netrc", "notes.txt", "torch-9.9.9-py3-none-any.whl", "../outside.whl", "%2e%2e/outside.whl",
                     "sub/", "index.html/.netrc", "./notes.txt", "../outside.deb"):  # fmt: skip
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url + path, timeout=10)
            assert refused.value.code == 404, path
    # Debian's packages (an --mpi build's) and their index, as apt asks a flat repository for them:
    # "./NAME", an epoch's colon as apt-get download names the file (%3a), quoted once more
    deb = wheels / "openssh-client_1%3a9.2p1-2+deb12u10_amd64.deb"
    deb.write_bytes(b"!<arch> deb")
    (wheels / "Packages").write_text("Package: openssh-client\n")
    (tmp_path / "outside.deb").write_text("out")
    with serve_wheels(str(wheels)) as url:
        assert url is not None
        assert deb.name not in urllib.request.urlopen(url, timeout=10).read().decode()  # pip's page: wheels
        assert urllib.request.urlopen(url + "./Packages", timeout=10).read() == b"Package: openssh-client\n"
        asked = url + "./openssh-client_1%253a9.2p1-2%2bdeb12u10_amd64.deb"
        assert urllib.request.urlopen(asked, timeout=10).read() == b"!<arch> deb"


def test_in_image_mounts_the_run_folder_read_only_and_the_code_as_a_copy(tmp_path) -> None:
    """Issue 40 row 11: the code folder and the run folder were mounted read-write, so the image's code
    could rewrite the user's sources (or plant .git/hooks) and the run's records; and no ``--`` stood
    before the image."""
    code = tmp_path / "project"
    (code / ".git" / "hooks").mkdir(parents=True)
    (code / "train.py").write_text("print('hi')\n")
    run = tmp_path / "state" / "runs" / "r-1"
    run.mkdir(parents=True)
    spec = validate(
        spec_from_dict(
            {"name": "t", "local_image": "registry/t:1", "entrypoint": {"code": str(code), "script": "train.py"}}
        )
    )
    argv = in_image_command(spec, run, ["--nproc-per-node", "1"], {"A": "1"}, Engine("docker", "docker"))
    assert not (run / "code").exists()  # the command is a plan: the run's start makes what it mounts
    prepare_in_image(spec, run)
    image = argv.index("registry/t:1")
    assert argv[image - 1] == "--"
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "--volume"]
    writable = [m for m in mounts if not m.endswith(":ro")]
    assert f"{run.resolve()}:{run.resolve()}:ro" in mounts
    assert sorted(m.split(":")[0] for m in writable) == sorted(
        [str(run.resolve() / "code"), *(str(run.resolve() / n) for n in ("checkpoints", "logs", "metrics"))]
    )
    assert not any(m.startswith(str(code)) for m in mounts)  # the user's folder is not the container's
    assert (run / "code" / "train.py").read_text() == "print('hi')\n" and not (run / "code" / ".git").exists()


@pytest.mark.parametrize("image", ["--privileged/x", "repo:tag\n", "-v/:/host", " repo", "repo:tag --rm"])
def test_an_image_reference_that_could_be_read_as_an_option_is_refused(image: str) -> None:
    with pytest.raises(SpecError, match="image reference"):
        validate(spec_from_dict({"name": "t", "local_image": image}))


def test_files_that_hold_the_specs_env_are_private(tmp_path) -> None:
    """Issue 40, also noticed: launch.json and spec.yaml kept the spec's env (tokens) at 0644."""
    import sys

    state = tmp_path / "state"
    (tmp_path / "train.py").write_text("print('step 1/1 loss 0.5')\n")
    spec = spec_from_dict(
        {"name": "t", "env": {"HF_TOKEN": "secret"},
         "entrypoint": {"code": str(tmp_path), "script": "train.py", "python": sys.executable}}
    )  # fmt: skip
    backend = LocalBackend(state)
    run_id = backend.submit(spec)
    try:
        run = state / "runs" / run_id
        for name in ("launch.json", "spec.yaml"):
            assert (run / name).stat().st_mode & 0o777 == 0o600, name
    finally:
        backend.cancel(run_id)


def test_a_launcher_that_writes_its_exit_record_and_ends_between_two_reads_is_read_from_the_record(
    tmp_path, monkeypatch
):
    """Seen under load (two test runs side by side): status read no exit.json, then found pid.json's
    process ending (/proc no longer shows what proves it the launcher) and said "no launcher of this
    run is running", where the record written just before said how the run ended."""
    run = planted(tmp_path, GOOD)
    record = json.loads((run / "exit.json").read_text()) | {"exit_code": 1}
    (run / "exit.json").unlink()
    (run / "pid.json").write_text(json.dumps({"pid": os.getpid(), "create_time": 0}))
    backend = LocalBackend(tmp_path)
    proving = LocalBackend._launcher_or_why

    def ending_between_the_reads(self, run_dir):
        (run_dir / "exit.json").write_text(json.dumps(record))  # the launcher's last write, then it ends
        return None, f"pid.json names process {os.getpid()}, which is not this run's launcher: no"

    monkeypatch.setattr(LocalBackend, "_launcher_or_why", ending_between_the_reads)
    status = backend.status(GOOD)
    assert status.state is JobState.FAILED and status.exit_code == 1, status
    assert "no launcher" not in status.reason and not status.warnings, status
    monkeypatch.setattr(LocalBackend, "_launcher_or_why", proving)
    assert backend.status(GOOD).exit_code == 1


def test_a_launcher_caught_in_its_exec_is_read_again_not_refused(tmp_path) -> None:
    """Popen returns once the launcher's new program is in memory, a moment before the kernel sets its
    arguments: a status read then found no arguments, took the run's own launcher for another
    process and failed the run (seen once in CI). Its arguments are read again until they come."""
    import subprocess
    import sys

    import psutil

    from torchdeck.backends.local import RUN_TOKEN_ENV

    run_dir = tmp_path / "runs" / "r-1"
    run_dir.mkdir(parents=True)
    (run_dir / "launch.json").write_text(json.dumps({"token": "t0k"}))
    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        real = psutil.Process(leader.pid)

        class CaughtInExec:  # the real process, as /proc shows it in that moment: no arguments yet
            pid = leader.pid
            reads = 0

            def cmdline(self) -> list[str]:
                self.reads += 1
                return (
                    [] if self.reads < 3 else [sys.executable, "-m", "torchdeck.backends.local_launcher", str(run_dir)]
                )

            def environ(self) -> dict[str, str]:
                return {**real.environ(), "TORCHDECK_RUN_ID": "r-1", RUN_TOKEN_ENV: "t0k"}

        caught = CaughtInExec()
        assert LocalBackend._not_launcher_of(caught, run_dir) == "" and caught.reads == 3
        assert LocalBackend._not_launcher_of(real, run_dir) == "which is not this run's launcher"
    finally:
        leader.kill()
        leader.wait()
