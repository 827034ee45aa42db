"""The local backend: a job is torchrun on this machine, in a session of its
own, with one folder per run under the state directory::

    runs/<run id>/
        spec.yaml          the spec as submitted
        launch.json        the command, port, pid, submit time
        launcher.log       torchrun's own output
        logs/<...>/attempt_<n>/<rank>/stdout.log   each rank's output, per attempt
        metrics/rank-<r>.jsonl                      each rank's metric stream
        checkpoints/       snapshots and model.pt (unless the spec says elsewhere)
        exit.json          exit code and time, written when torchrun ends
        cancel             present once a stop was asked for

Everything the console shows is read back from this folder, so a console
started later (or on another SSH session) reattaches to any run.

``LocalBackend`` is one class over one folder layout (submit, status, stop, logs, metrics,
node figures, the trainer's tools), which is why this module is near 700 lines; reading the
folder's files is ``run_files.py``, the user's code checks ``local_user_code.py``, the process
that waits for torchrun ``local_launcher.py``."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from torchdeck.trainer.metrics import strict_json
from torchdeck.trainer.triage_probe import FR_BUFFER_SIZE, TRIAGE_DIR_ENV

from .base import (
    Backend,
    GateStep,
    JobState,
    JobStatus,
    LogLine,
    MetricEvent,
    NodeMetrics,
    Plan,
    PlanPayload,
    ProcessMetrics,
    Progress,
    TestResult,
    as_test_result,
    silent,
)
from .capabilities import BudgetChange, CifarTasks, DataReady, HangTriage, HealthGate, NodeMeasures
from .cost import NodeUse, PriceBook, RunCost, budget_stop_words, dollars, price_run
from .errors import BackendError, RunIdTaken, RunNotFound, SpecError
from .events import describe_record, fold_progress, fold_ranks, parse_metric_line, parse_metric_lines, tool_result
from .files import read_bytes, write_atomically
from .gpu import read_gpus
from .names import check_run_id, new_run_id
from .recovery import RecoveryLog
from .run_files import STATUS_FILE, FileTail, first_line, kept_status, tail_lines
from .run_members import reap_run, run_members
from .triage import Triage

if TYPE_CHECKING:
    from .health import GateResult
    from .spec import JobSpec
    from .spec_options import Where

from .run_records import (
    CancelRecord,
    ExitRecord,
    LaunchRecord,
    PidRecord,
    RunRecordError,
    budget_now,
    read_typed,
    write_json,
)

STOP_GRACE_S = 10.0
PRIVATE = 0o600
"""The mode of a run's files that hold the spec's ``env`` (tokens, keys): ``spec.yaml``, ``launch.json``."""
RUN_TOKEN_ENV = "TORCHDECK_RUN_TOKEN"
"""The launcher's proof of who it is: a random token in its environment and its launch record."""
EXEC_WAITS = 50
"""Tries, 10 ms apart, to read the arguments of a launcher caught in its exec: Popen returns once
the new program's memory is in place, a moment before the kernel sets its arguments (the console
that had just started a run read none, and took its launcher for another process)."""
LAUNCHER_START_S = 20.0
"""How long a run may go without its launcher's pid.json (the launcher writes it as it starts, and
so does the console that started it) before it is said never to have started."""
ROOT_CAUSE_RE = re.compile(
    r"Root Cause.*?rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\).*?exitcode\s*:\s*(-?\d+)", re.DOTALL
)
"""torchrun's summary of a failed job: the rank that failed first, and its exit code."""
METRICS_BATCH = 2048
"""Events per batch at most: a reader far behind (a console attaching to a
long run) catches up in steps the screen can draw between."""
METRICS_READ_BYTES = 64 * 1024
ATTEMPT_RE = re.compile(r"attempt_(\d+)\Z")


RENDEZVOUS_PORT = 0
"""torchrun's c10d rendezvous port here: 0, a free one its agent binds as it starts (as
``--standalone`` does). A port picked when the run is planned could be taken by the time the plan
is applied (a preview left open, a busy host), and the run would fail to start."""


RANKS_READ = 256
"""Ranks whose progress ``status`` reads (4 KiB of each one's file); the monitor follows every rank."""


STARTED_AT_ENV = "TORCHDECK_JOB_STARTED_AT"
"""When the run was submitted, for its ranks: the one variable a plan leaves to the submit."""


@dataclasses.dataclass(frozen=True)
class LocalLaunch(PlanPayload):
    """A local plan's payload: the launcher's record (``launch.json``) before its submit time and token."""

    record: LaunchRecord


class LocalBackend(Backend, HealthGate, NodeMeasures, CifarTasks, HangTriage, BudgetChange):
    """Jobs as torchrun process groups on this machine."""

    name = "local"
    fields: Where = "local"

    def __init__(self, state_dir: str | Path, python: str | None = None, local_price_per_hour: float | None = None):
        self.state_dir = Path(state_dir)
        self.local_price_per_hour = local_price_per_hour
        """What this machine costs an hour (the settings'), for runs whose spec names no price."""
        self.runs_dir = self.state_dir / "runs"
        self.python = python or sys.executable
        self._children: dict[int, subprocess.Popen] = {}
        self._procs: dict[int, psutil.Process] = {}
        self._ended: dict[str, JobStatus] = {}
        self._proved: dict[str, psutil.Process] = {}
        """Each running run's launcher, once proved from /proc (``_launcher_or_why``)."""
        """Ended runs' statuses as read from their status.json, which does not change: a console
        that lists thousands of runs every 2 s reads each once."""

    def __getstate__(self) -> dict:
        """A copy for another process: its caches of this process's children stay here."""
        return {**self.__dict__, "_children": {}, "_procs": {}, "_ended": {}, "_proved": {}}

    # -- rendering and submitting -------------------------------------------------

    def _check(self, spec: JobSpec) -> JobSpec:
        # what plans and starts a run is read when one is planned: the console's first frame lists runs
        from .local_user_code import user_python
        from .spec import validate

        spec = validate(spec)
        if spec.nodes != 1:
            raise SpecError(
                "nodes",
                f"the local backend runs one node, got {spec.nodes}",
                "set nodes: 1, or use --backend kubernetes for several machines",
            )
        if spec.budget is not None and self._price(spec.node_price_per_hour) is None:
            raise SpecError(
                "budget",
                f"a budget of {dollars(spec.budget)} needs a price for this machine, and none is set",
                "set node_price_per_hour in the spec, or local_price_per_hour in the settings "
                "(TORCHDECK_LOCAL_PRICE_PER_HOUR)",
            )
        if not spec.builtin:  # the folder and interpreter as the run uses them (and its spec.yaml records)
            code = Path(spec.entrypoint.code).expanduser().resolve()
            python = "python" if spec.local_image else user_python(spec, self.python)  # the image's own
            spec = dataclasses.replace(
                spec, entrypoint=dataclasses.replace(spec.entrypoint, code=str(code), python=python)
            )
        return spec

    def _command(self, spec: JobSpec, run_dir: Path, port: int, run_id: str) -> list[str]:
        """torchrun and what each rank runs: the built-in trainer through sh (so that its stderr
        joins its stdout in one file, in the order it was written), or the user's code through
        ``rank_output`` (which does the same and reads metrics from its lines), both under the
        user's interpreter."""
        from .local_in_image import rank_command
        from .spec import trainer_arguments

        metrics_file = str(run_dir / "metrics" / "rank-{rank}.jsonl")
        if spec.local_image:  # the same torchrun in the image, as a pod runs it (local_in_image)
            run_dir = run_dir.resolve()  # mounted at the same path: the paths in the command hold there
            metrics_file = str(run_dir / "metrics" / "rank-{rank}.jsonl")
            checkpoints = spec.checkpoint_dir or str(run_dir / "checkpoints")
            data_dir = str(Path(spec.data_dir).expanduser().resolve())
            inner = rank_command(spec, metrics_file, trainer_arguments(spec, data_dir, checkpoints, metrics_file))
            return [*self._torchrun(spec, run_dir, port, run_id)[3:], *inner]
        if spec.builtin:
            python = self.python
            args = trainer_arguments(
                spec, spec.data_dir, spec.checkpoint_dir or str(run_dir / "checkpoints"), metrics_file
            )
            rank = ["sh", "-c", 'exec "$@" 2>&1', "sh", self.python, "-u", "-m", "torchdeck.trainer", *args]
        else:
            e = spec.entrypoint
            python = str(e.python)
            # the script by its place in the code folder: the ranks run in entrypoint.workdir within it
            script = e.script if not e.workdir else str(Path(e.code) / e.script) if e.script else None
            program = [script] if script else ["-m", str(e.module)]
            rank = [self.python, "-m", "torchdeck.backends.rank_output", metrics_file, spec.metrics.pattern or "", "--"]
            rank += [python, "-u", *program, *e.args]
        return [*self._torchrun(spec, run_dir, port, run_id, python), *rank]

    def _torchrun(self, spec: JobSpec, run_dir: Path, port: int, run_id: str, python: str = "python") -> list[str]:
        """``python -m torch.distributed.run`` and its arguments, up to the rank's command."""
        return [
            python,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            str(spec.nproc_per_node),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"127.0.0.1:{port}",
            "--rdzv-id",
            run_id,
            "--max-restarts",
            str(spec.max_restarts),
            "--log-dir",
            str(run_dir / "logs"),
            "--redirects",
            "3",
            "--no-python",
        ]

    def plan(self, spec: JobSpec) -> Plan:
        """The run's id (free now: ``apply`` claims its folder), the command its launcher starts and
        that command's environment and folder."""
        from .local_in_image import code_paths, in_image_command
        from .local_user_code import check_user_code, report_helper_path

        spec = self._check(spec)
        if not spec.builtin:
            check_user_code(spec)
        run_id = new_run_id(spec.name, lambda candidate: (self.runs_dir / candidate).exists())
        run_dir = self.runs_dir / run_id
        helper = {} if spec.builtin else {"TORCHDECK_USER_PATH": str(report_helper_path(run_dir))}
        if spec.entrypoint.workdir and not spec.builtin:  # the project's packages import, as in pods
            path = [spec.entrypoint.code, spec.env.get("PYTHONPATH", "")]
            helper["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
        if spec.metrics.tags and not spec.builtin:  # which logger scalar is which (rank_output)
            helper["TORCHDECK_METRIC_TAGS"] = json.dumps(spec.metrics.tags)
        port = RENDEZVOUS_PORT
        # each rank's hang-triage probe answers in the run's folder (trainer/triage_probe.py), and
        # PyTorch's Flight Recorder keeps the newest collectives for it (the spec's env wins)
        probe = {TRIAGE_DIR_ENV: str(run_dir.resolve() / "triage"), "TORCH_FR_BUFFER_SIZE": FR_BUFFER_SIZE}
        env = {**probe, **spec.env, "PYTHONUNBUFFERED": "1", "TORCHDECK_RUN_ID": run_id, **helper}
        if spec.local_image and not spec.builtin:  # the code at the pods' path in the image
            helper["PYTHONPATH"] = code_paths(spec)[0]
        cmd = self._command(spec, run_dir, port, run_id)
        if spec.local_image:
            env["PYTHONPATH"] = helper.get("PYTHONPATH", env.get("PYTHONPATH", ""))
            # the container takes the launcher's variables by name: the start time's too, set at submit
            cmd = in_image_command(spec, run_dir, cmd, {**env, STARTED_AT_ENV: ""})
        cwd = (
            os.getcwd()
            if spec.builtin or spec.local_image
            else str(Path(spec.entrypoint.code) / (spec.entrypoint.workdir or ""))
        )
        launch = LaunchRecord(
            run_id=run_id,
            name=spec.name,
            cmd=cmd,
            env=env,
            cwd=cwd,
            port=port,
            world_size=spec.world_size,
            host=socket.gethostname(),
            in_image=spec.local_image,
            node_price_per_hour=spec.node_price_per_hour,
            budget=spec.budget,
            price_per_hour=self._price(spec.node_price_per_hour),
        )
        notes = [f"runs in {run_dir} (torchrun's rendezvous on 127.0.0.1, a port its agent picks as it starts)"]
        gate = GateStep(keeps_off=False) if spec.cluster.health_gate else None
        return Plan(
            "local", run_id, spec, command=cmd, env=env, cwd=cwd, notes=notes, gate=gate, payload=LocalLaunch(launch)
        )

    def start(self, plan: Plan, progress: Progress = silent) -> str:
        """Claim the plan's run folder, write its records and start its launcher with the plan's command."""
        if not isinstance(plan.payload, LocalLaunch):
            raise BackendError("this plan was not made by the local backend", "make it with plan(spec)")
        launch = plan.payload.record
        spec, run_id = plan.spec, plan.run_id
        try:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            run_dir = self.runs_dir / run_id
            try:  # claiming the folder is the check: two submits never share one
                run_dir.mkdir()
            except FileExistsError:
                raise RunIdTaken(f"run {run_id} was started since the plan was made", "plan again") from None
            (run_dir / "metrics").mkdir()
            write_atomically(run_dir / "spec.yaml", spec.to_yaml(), PRIVATE)  # its env may hold tokens
            if not spec.builtin:
                from .local_user_code import report_helper

                report_helper(run_dir)
            if spec.local_image:
                from .local_in_image import prepare_in_image

                prepare_in_image(spec, run_dir)
            now = time.time()
            token = secrets.token_hex(16)
            record = dataclasses.replace(
                launch, env={**plan.env, STARTED_AT_ENV: repr(now)}, submitted_at=now, token=token
            )
            write_json(run_dir / "launch.json", dataclasses.asdict(record), PRIVATE)
            with open(run_dir / "launcher.log", "ab") as log:
                child = subprocess.Popen(
                    [self.python, "-m", "torchdeck.backends.local_launcher", str(run_dir)],
                    env={**os.environ, "TORCHDECK_RUN_ID": run_id, RUN_TOKEN_ENV: token},
                    start_new_session=True,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    close_fds=True,
                )
            self._children[child.pid] = child
            create_time = psutil.Process(child.pid).create_time() if psutil.pid_exists(child.pid) else 0.0
            write_json(run_dir / "pid.json", {"pid": child.pid, "create_time": create_time})
        except OSError as exc:
            raise BackendError(
                f"cannot start the run: {exc.strerror or exc}", f"check that {self.state_dir} is writable"
            ) from None
        return run_id

    # -- finding runs ------------------------------------------------------------

    def resolve(self, run_id: str) -> Path:
        """The folder of a run given its id or a unique prefix of it."""
        if run_id and "/" not in run_id and (self.runs_dir / run_id / "launch.json").exists():
            return self.runs_dir / run_id
        matches = (
            sorted(p for p in self.runs_dir.glob(f"{glob_escape(run_id)}*") if (p / "launch.json").exists())
            if run_id and "/" not in run_id and self.runs_dir.exists()
            else []
        )
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            shown = ", ".join(p.name for p in matches[:4])
            raise RunNotFound(f"{run_id!r} matches {len(matches)} runs: {shown}", "give more of the run id")
        raise RunNotFound(f"no run {run_id!r}", "`torchdeck jobs` lists the runs")

    # -- state -------------------------------------------------------------------

    def _launcher(self, run_dir: Path) -> psutil.Process | None:
        """The run's launcher process if it is still alive (and is not a
        different process that reused its pid, nor one that pid.json only claims)."""
        return self._launcher_or_why(run_dir)[0]

    def _launcher_or_why(self, run_dir: Path) -> tuple[psutil.Process | None, str]:
        """The run's launcher, proved from /proc, not taken from pid.json (a file the run's own code
        can write): the process leads its group, runs ``local_launcher`` for this folder, and carries
        this run's id and the token from its launch record in its environment. Else None, and why a
        live process that pid.json names is not taken ("" where it names none alive). A launcher once
        proved stays proved while it runs (psutil tells a reused pid apart): the monitor asks often."""
        proved = self._proved.get(str(run_dir))
        if proved is not None:
            with contextlib.suppress(psutil.Error):
                if proved.is_running() and proved.status() != psutil.STATUS_ZOMBIE:
                    return proved, ""
            del self._proved[str(run_dir)]
            return None, ""  # it ended
        try:
            info = read_typed(PidRecord, run_dir / "pid.json")
        except RunRecordError as exc:
            return None, exc.message
        if info is None or info.pid is None or info.pid <= 0:
            return None, ""
        child = self._children.get(info.pid)
        if child is not None and child.poll() is not None:
            return None, ""  # reaped: it ended
        try:
            proc = psutil.Process(info.pid)
            if info.create_time and abs(proc.create_time() - info.create_time) > 1.0:
                return None, ""
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None, ""
            why = self._not_launcher_of(proc, run_dir)
        except psutil.NoSuchProcess:
            return None, ""
        except psutil.AccessDenied:
            why = "whose environment torchdeck may not read"
        if why:
            shown = str(info.pid)
            with contextlib.suppress(psutil.Error):
                shown += f" ({proc.name()})"
            refused = (
                f"pid.json names process {shown}, {why}: torchdeck signals no process it cannot prove is the run's"
            )
            return None, refused
        self._proved[str(run_dir)] = proc
        return proc, ""

    @staticmethod
    def _not_launcher_of(proc: psutil.Process, run_dir: Path) -> str:
        """Why ``proc`` is not the launcher of the run in ``run_dir`` ("" where it is)."""
        try:
            token = (read_typed(LaunchRecord, run_dir / "launch.json") or LaunchRecord()).token
        except RunRecordError:
            token = ""
        cmd = proc.cmdline()
        for _ in range(EXEC_WAITS):  # caught in its exec: the kernel sets a new program's arguments last
            if cmd:
                break
            time.sleep(0.01)
            cmd = proc.cmdline()
        if "torchdeck.backends.local_launcher" not in cmd[1:3] or not cmd[-1:] or Path(cmd[-1]).name != run_dir.name:
            return "which is not this run's launcher"
        if os.getpgid(proc.pid) != proc.pid:
            return "which leads no process group"
        env = proc.environ()
        if env.get("TORCHDECK_RUN_ID") != run_dir.name or not token or env.get(RUN_TOKEN_ENV) != token:
            return "which does not carry this run's id and token"
        return ""

    @staticmethod
    def _attempts(run_dir: Path) -> list[tuple[int, Path]]:
        """torchrun's attempt folders, oldest first."""
        out = []
        for path in run_dir.glob("logs/*/attempt_*"):
            m = ATTEMPT_RE.search(path.name)
            if m:
                out.append((int(m.group(1)), path))
        return sorted(out)

    def _progress(self, run_dir: Path, status: JobStatus) -> None:
        """Fill epoch, step, loss and accuracy from the end of the lowest rank's metric file, each of
        the first ``RANKS_READ`` ranks' progress from the end of theirs, and the first error any rank
        reported. Cheap with thousands of ranks: the files beyond are only searched for an error line."""
        files = sorted(
            (run_dir / "metrics").glob("rank-*.jsonl"),
            key=lambda p: int(p.stem.split("-")[1]) if p.stem.split("-")[1].isdigit() else 1 << 30,
        )
        if not files:
            return
        # the file's first line (its start: epochs, total steps), then its tail
        first = parse_metric_line(first_line(files[0]))
        error = fold_progress(status, [first] if first is not None and first.event == "start" else [])
        tail = parse_metric_lines(tail_lines(files[0], 16384))
        error = fold_progress(status, tail) or error
        recovered = RecoveryLog()
        recovered.feed(tail)
        status.recovery = recovered.lines()
        ranks = fold_ranks(tail)
        for path in files[1 : 1 + RANKS_READ]:  # each rank's last lines: its progress, its error
            events = parse_metric_lines(tail_lines(path, 4096))
            fold_ranks(events, ranks)
            if error is None:
                error = next((e.record for e in events if e.event == "error"), None)
        for path in files[1 + RANKS_READ :] if error is None else ():  # beyond: only an error is looked for
            for line in tail_lines(path, 4096):
                if b'"event":"error"' in line:
                    event = parse_metric_line(line)
                    if event is not None:
                        error = event.record
                        break
        status.ranks = [ranks[r] for r in sorted(ranks)]
        if error is not None and not status.reason:
            status.reason, status.hint = f"rank {error.get('rank')}: {error.get('message')}", error.get("hint") or ""

    def _failure_reason(self, run_dir: Path, code: int) -> tuple[str, str]:
        """The last words of a failed run when no rank reported an error, and a hint ("" for the
        usual one): a rank's error line, else the rank torchrun names as the root cause, with
        how it ended and its last line, else torchrun's own error."""
        attempts = self._attempts(run_dir)
        for _, attempt in reversed(attempts):
            for log in sorted(attempt.glob("*/stdout.log")):
                for line in reversed(tail_lines(log, 8192)):
                    text = line.decode(errors="replace").strip()
                    if parse_metric_line(line) is None and re.search(r"(Error|error:|Exception|Killed)", text):
                        return f"rank {log.parent.name}: {text}", ""
        launcher = b"\n".join(tail_lines(run_dir / "launcher.log", 16384)).decode(errors="replace")
        cause = ROOT_CAUSE_RE.search(launcher)
        if cause and attempts:
            rank, local, exit_code = (int(g) for g in cause.groups())
            last = [x for x in tail_lines(attempts[-1][1] / str(local) / "stdout.log", 4096) if x.strip()]
            said = last[-1].decode(errors="replace").strip()[:200] if last else "no output"
            how = f"exit code {exit_code}"
            if exit_code < 0 or exit_code > 128:
                with contextlib.suppress(ValueError):
                    how = f"{signal.Signals(-exit_code if exit_code < 0 else exit_code - 128).name} ({how})"
            hint = ""
            if "terminate called without an active exception" in said:
                hint = (
                    "PyTorch's gloo threads can abort a normal exit after the work is done: "
                    "end the script as examples/ddp/toy.py's finish() does"
                )
            return f"rank {rank} ended with {how}: {said}", hint
        for line in reversed(tail_lines(run_dir / "launcher.log", 8192)):
            text = line.decode(errors="replace").strip()
            if ("Error" in text or "error" in text) and "To enable traceback" not in text:
                return text[:300], ""
        return killed_words(code), ""

    def _status_of(self, run_dir: Path) -> JobStatus:
        """The run's status: from its ``status.json`` once it has ended (its launcher writes it as
        it exits, or the first reader that sees it ended), else from its files and processes. The
        file is written whole or not at all, and one that does not read is worked out again: a
        crash cannot leave a wrong status behind."""
        kept = self._kept(str(run_dir))
        if kept is not None:
            return kept
        status = self._work_out_status(run_dir)
        if status.state.is_terminal and (run_dir / "exit.json").exists():
            with contextlib.suppress(OSError):  # a reader's copy: the launcher's own write says why it failed
                write_atomically(run_dir / STATUS_FILE, strict_json(status.to_dict()))
        return status

    def record_final_status(self, run_id: str) -> JobStatus:
        """Work out an ended run's status and keep it in its status.json (the launcher does this
        as it exits, so listing runs reads one file each); an OSError where it cannot be written."""
        run_dir = self.resolve(run_id)
        status = self._work_out_status(run_dir)
        write_atomically(run_dir / STATUS_FILE, strict_json(status.to_dict()))
        return status

    def _kept(self, run_dir: str) -> JobStatus | None:
        kept = self._ended.get(run_dir)
        if kept is None:
            kept = kept_status(run_dir)
            if kept is not None:
                self._ended[run_dir] = kept
        if kept is None:
            return None
        kept = dataclasses.replace(kept)  # a copy: callers may change theirs
        if kept.cost is not None and kept.cost.amount is None and self.local_price_per_hour is not None:
            kept.cost = kept.cost.priced(self.local_price_per_hour, "the local_price_per_hour setting")
        return kept

    def _work_out_status(self, run_dir: Path) -> JobStatus:
        """The run's status from its records, files and processes; RunRecordError where one of its
        records is there but is not one (``_unreadable`` makes that a row of its own)."""
        launch = read_typed(LaunchRecord, run_dir / "launch.json") or LaunchRecord()
        status = JobStatus(
            run_id=run_dir.name,
            name=launch.name or run_dir.name,
            backend=self.name,
            state=JobState.UNKNOWN,
            world_size=launch.world_size,
            submitted_at=launch.submitted_at,
            location=str(run_dir),
        )
        attempts = self._attempts(run_dir)
        status.restarts = attempts[-1][0] if attempts else 0
        self._progress(run_dir, status)
        done = read_typed(ExitRecord, run_dir / "exit.json")
        request = read_typed(CancelRecord, run_dir / "cancel")
        cancelled = request is not None
        stopped_why, stopped_hint = "stopped by the user", ""
        if request is not None and request.budget:
            stopped_why = budget_stop_words(request.budget, request.spent or 0.0)
            stopped_hint = (
                f"raise budget in the spec; `torchdeck resume {run_dir.name}` continues from its last checkpoint"
            )
        launcher, refused = self._launcher_or_why(run_dir) if done is None else (None, "")
        if done is None and launcher is None:
            # the launcher writes exit.json and then ends: one that did both between the two reads
            # (as it ends, /proc no longer shows what proves it) left the record that says how it ended
            done = read_typed(ExitRecord, run_dir / "exit.json")
            if done is not None:
                refused = ""
        if done is not None:
            status.exit_code, status.finished_at = done.exit_code, done.finished_at
            if cancelled:
                status.state, status.reason, status.hint = JobState.CANCELLED, stopped_why, stopped_hint
            elif status.exit_code == 0:
                status.state, status.reason, status.hint = JobState.SUCCEEDED, "", ""
            else:
                status.state = JobState.FAILED
                if done.reaped and (status.exit_code or 0) < 0:  # torchrun itself was killed
                    # what its ranks said after (its store gone, their collectives broken) follows from it
                    status.reason = (
                        f"{killed_words(status.exit_code or 1)}; the {done.reaped} processes it left were stopped"
                    )
                    status.hint = f"`torchdeck resume {run_dir.name}` continues from its last checkpoint"
                if not status.reason:
                    status.reason, hint = self._failure_reason(run_dir, status.exit_code or 1)
                    status.hint = hint or f"`torchdeck logs {run_dir.name}` shows every rank's output"
        elif launcher is not None or (refused and run_members(run_dir.name)):
            # its launcher, proved; or, where pid.json names a process that is not it, the processes
            # that carry the run's id (``stop`` ends those, and signals nothing pid.json names)
            status.reason, status.hint = "", ""
            if status.step > 0:
                status.state = JobState.RUNNING
            else:
                reported = len(list((run_dir / "metrics").glob("rank-*.jsonl")))
                status.state = JobState.PENDING
                status.reason = f"starting: {reported} of {status.world_size} ranks have reported"
        elif cancelled:
            status.state, status.reason, status.hint = JobState.CANCELLED, stopped_why, stopped_hint
        elif not (run_dir / "pid.json").exists() and time.time() - status.submitted_at < LAUNCHER_START_S:
            status.state, status.reason = JobState.PENDING, "starting its launcher"
        elif not (run_dir / "pid.json").exists():
            status.state = JobState.FAILED
            status.reason = "it never started: the console that submitted it stopped before starting its launcher"
            status.hint = f"start it again: `torchdeck train {run_dir / 'spec.yaml'}`"
        else:
            status.state = JobState.FAILED
            status.reason = "the launcher ended without recording an exit status (killed, or the machine rebooted)"
            status.hint = f"`torchdeck logs {run_dir.name}` shows what the ranks wrote"
        if refused:
            status.warnings.append(refused)
            if status.state is JobState.FAILED and done is None:
                status.reason = f"no launcher of this run is running: {refused}"
        status.cost = self._cost(run_dir, launch, status)
        return status

    def _unreadable(self, run_dir: Path, exc: RunRecordError) -> JobStatus:
        """A run whose records cannot be read, as one row saying so: every other run still shows."""
        return JobStatus(
            run_id=run_dir.name,
            name=run_dir.name,
            backend=self.name,
            state=JobState.UNKNOWN,
            world_size=0,
            submitted_at=0.0,
            location=str(run_dir),
            reason=f"cannot read the run: {exc.message}",
            hint=exc.hint or f"see what is in {run_dir}",
        )

    def _price(self, spec_price: float | None) -> float | None:
        """This machine's price an hour for a run: its spec's, else the settings'."""
        return spec_price if spec_price is not None else self.local_price_per_hour

    def _cost(self, run_dir: Path, launch: LaunchRecord, status: JobStatus) -> RunCost:
        """This machine, held from the submit to the exit (waiting for ranks to start counts),
        against the budget as it stands (``torchdeck budget`` may have changed it)."""
        budget = budget_now(run_dir, launch)
        use = NodeUse(f"this machine ({launch.host or 'local'})", status.submitted_at, status.finished_at)
        if not status.submitted_at:
            return RunCost([], budget)
        if status.finished_at is None and status.state.is_terminal:
            use.ended_at = status.submitted_at  # ended unrecorded: no time is known to have been held
        book = PriceBook(launch.node_price_per_hour, self.local_price_per_hour, "local_price_per_hour")
        return price_run([use], book, budget, running=not status.state.is_terminal)

    def set_budget(self, run_id: str, amount: float) -> JobStatus:
        """Change a running run's budget: its launcher reads it within a second, and stops the run
        (a snapshot first) once its cost reaches it, as it would have at submit."""
        run_dir = self.resolve(run_id)
        status = self._status_of(run_dir)
        if status.state.is_terminal:
            raise BackendError(
                f"{run_dir.name} has {status.state.value}: a budget is for a run that goes on",
                f"set budget in the spec, then `torchdeck resume {run_dir.name}`",
            )
        launch = read_typed(LaunchRecord, run_dir / "launch.json") or LaunchRecord()
        if not launch.price_per_hour:
            raise BackendError(
                f"{run_dir.name} has no price for this machine: a budget cannot be measured",
                "set node_price_per_hour in the spec (or local_price_per_hour in the settings) and start it again",
            )
        write_json(run_dir / "budget.json", {"budget": amount, "set_at": time.time()})
        return self._status_of(run_dir)

    def status(self, run_id: str) -> JobStatus:
        """The run's status; one whose records cannot be read is a status saying so (as ``list``
        shows it), so that ``status``, ``compare`` and the monitor show it beside the others."""
        from . import triage

        run_dir = self.resolve(run_id)
        try:
            status = self._status_of(run_dir)
        except RunRecordError as exc:
            return self._unreadable(run_dir, exc)
        verdict = triage.load(run_dir / "triage") if (run_dir / "triage").is_dir() else None
        return status if verdict is None else dataclasses.replace(status, triage=verdict)

    def triage(self, run_id: str, wait_s: float = 5.0) -> Triage:
        """Ask the run's ranks where they are (each rank's probe answers in ``triage/``), say which
        is not where the others are, and keep the verdict beside the dumps."""
        from . import triage

        status = self.status(run_id)
        triage.require_running(status.run_id, status.state)
        folder = self.resolve(status.run_id) / "triage"
        dumps, _token = triage.ask(folder, status.world_size, wait_s)
        verdict = triage.verdict(status.run_id, status.world_size, dumps, str(folder), lambda rank, d: d["host"])
        triage.save(folder, verdict)
        return verdict

    def list(self) -> list[JobStatus]:
        """Every run, newest first; a run whose records cannot be read is a row saying so."""
        if not self.runs_dir.exists():
            return []
        statuses = []
        with os.scandir(self.runs_dir) as entries:  # thousands of ended runs: one small file each
            for entry in entries:
                kept = self._kept(entry.path)
                if kept is not None:
                    statuses.append(kept)
                elif os.path.lexists(os.path.join(entry.path, "launch.json")):
                    try:
                        statuses.append(self._status_of(Path(entry.path)))
                    except RunRecordError as exc:
                        statuses.append(self._unreadable(Path(entry.path), exc))
        return sorted(statuses, key=lambda s: s.submitted_at, reverse=True)

    # -- stopping ----------------------------------------------------------------

    @staticmethod
    def _group(pgid: int) -> builtins.list[psutil.Process]:
        """Live (non-zombie) processes in a process group."""
        out = []
        for proc in psutil.process_iter(["status"]):
            try:
                if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                    out.append(proc)
            except (ProcessLookupError, psutil.Error):
                continue
        return out

    def _signal_group(self, pgid: int, sig: int, until: float) -> bool:
        """Send ``sig`` to the group and wait until it is empty or ``until``."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        while time.monotonic() < until:
            for child in self._children.values():
                child.poll()
            if not self._group(pgid):
                return True
            time.sleep(0.1)
        return not self._group(pgid)

    def cancel(self, run_id: str, trust_label: bool = False) -> JobStatus:
        run_dir = self.resolve(run_id)
        try:
            status = self._status_of(run_dir)
        except RunRecordError as exc:  # no record to trust: only the processes that carry its id end
            reap_run(run_dir.name)
            unreadable = self._unreadable(run_dir, exc)
            unreadable.warnings.append("its launcher was not signalled: its records cannot be read")
            return unreadable
        if status.state.is_terminal:
            if run_members(run_dir.name):  # a launcher no console recorded, or what a crash left
                reap_run(run_dir.name)
            return status
        write_json(run_dir / "cancel", {"requested_at": time.time()})
        proc, refused = self._launcher_or_why(run_dir)
        if proc is not None:
            pgid = proc.pid  # proved the run's launcher, which leads its own session and group
            if not self._signal_group(pgid, signal.SIGTERM, time.monotonic() + STOP_GRACE_S):
                if not self._signal_group(pgid, signal.SIGKILL, time.monotonic() + 5.0):
                    raise BackendError(f"some processes of {run_dir.name} did not end", f"see `ps -g {pgid}`")
        reap_run(run_dir.name)  # ranks live in sessions of their own: none may outlive a stop
        if not (run_dir / "exit.json").exists():
            write_json(
                run_dir / "exit.json",
                {"exit_code": -signal.SIGTERM, "finished_at": time.time(), "signals": [int(signal.SIGTERM)]},
            )
        status = self._status_of(run_dir)
        if refused and refused not in status.warnings:
            status.warnings.append(refused)
        return status

    # -- streams -----------------------------------------------------------------

    def _is_over(self, run_dir: Path) -> bool:
        return os.path.lexists(run_dir / "exit.json") or self._launcher(run_dir) is None

    def logs(
        self, run_id: str, rank: int | None = None, follow: bool = False, poll_s: float = 0.2
    ) -> Iterator[builtins.list[LogLine]]:
        run_dir = self.resolve(run_id)
        tails: dict[Path, tuple[int, int, FileTail]] = {}
        try:
            while True:
                over = self._is_over(run_dir)  # checked before reading, so nothing written after is missed
                for attempt, attempt_dir in self._attempts(run_dir):
                    for log in sorted(attempt_dir.glob("*/stdout.log"), key=lambda p: int(p.parent.name)):
                        r = int(log.parent.name)
                        if (rank is None or r == rank) and log not in tails:
                            tails[log] = (r, attempt, FileTail(log))
                batch = []
                for r, attempt, tail in tails.values():
                    for raw in tail.read_lines():
                        record = parse_metric_line(raw)
                        text = describe_record(record.record) if record else raw.decode(errors="replace").rstrip()
                        batch.append(LogLine(r, text, attempt))
                if batch or follow:
                    yield batch
                if not batch and (not follow or over):
                    return
                if not batch:
                    time.sleep(poll_s)
        finally:
            for _, _, tail in tails.values():
                tail.close()

    async def metrics(
        self, run_id: str, follow: bool = True, poll_s: float = 0.1
    ) -> AsyncIterator[builtins.list[MetricEvent]]:
        run_dir = self.resolve(run_id)
        tails: dict[Path, FileTail] = {}
        try:
            while True:
                over = self._is_over(run_dir)
                for path in (run_dir / "metrics").glob("rank-*.jsonl"):
                    if path not in tails:
                        tails[path] = FileTail(path)
                batch: list[MetricEvent] = []
                got = 0
                for tail in tails.values():
                    lines = tail.read_lines(METRICS_READ_BYTES)
                    got += len(lines)
                    batch += parse_metric_lines(lines)
                    if len(batch) >= METRICS_BATCH:
                        yield batch
                        batch = []
                if batch:
                    yield batch
                if not got and (not follow or over):
                    return
                if not got:
                    await asyncio.sleep(poll_s)
        finally:
            for tail in tails.values():
                tail.close()

    # -- machines ----------------------------------------------------------------

    # -- jobs around training --------------------------------------------------------

    def _trainer_tool(self, module: str, args: builtins.list[str], on_wait: Progress) -> dict[str, object]:
        """Run one of the trainer's tools (it imports torch, the console does not) for its JSON."""
        on_wait(f"running python -m {module}")
        try:
            proc = subprocess.Popen(
                [self.python, "-m", module, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        except OSError as exc:
            raise BackendError(f"cannot run {module}: {exc}", "check the Python environment") from None
        lines: list[str] = []
        assert proc.stderr is not None and proc.stdout is not None
        for line in proc.stderr:  # progress lines, as they come
            line = line.rstrip()
            if line.strip():
                lines.append(line)
                if "error: " not in line:
                    on_wait(line.split(": ", 1)[-1] if line.startswith("torchdeck.trainer") else line)
        text = proc.stdout.read()
        code = proc.wait()
        result = tool_result(text)  # its error line raises, with the tool's message and hint
        if result is None:
            last = lines[-1] if lines else "no output"
            raise BackendError(f"python -m {module} ended with status {code} and no result: {last}", "")
        return result

    def check(
        self, spec: JobSpec | None = None, step: GateStep = GateStep(), progress: Progress = silent
    ) -> GateResult:
        """The health gate between the spec's ranks here (``trainer/check.py``, under torchrun on this
        machine's loopback; gloo on CPUs, NCCL on GPUs), and what this machine's GPUs are."""
        from .health import GateResult, judge

        nproc = spec.nproc_per_node if spec is not None else 2
        if not 2 <= nproc <= 64:
            raise BackendError(f"--nproc-per-node {nproc}: a sweep needs 2 to 64 ranks", "--nproc-per-node 2")
        args = ["--standalone", "--nproc-per-node", str(nproc), "-m", "torchdeck.trainer.check"]
        args += ["--max-bytes", str(step.max_bytes), "--dcgm-level", str(step.dcgm_level)]
        result = GateResult.from_tool(self._trainer_tool("torch.distributed.run", args, progress))
        result.short = judge(result)
        return result

    def prepare_data(self, spec: JobSpec, progress: Progress = silent, source: str | None = None) -> DataReady:
        spec.require_builtin("data prepare")
        args = ["--data-dir", spec.data_dir] + (["--from-s3", source] if source else [])
        return DataReady.from_tool(self._trainer_tool("torchdeck.trainer.data", args, progress))

    def test_model(self, spec: JobSpec, model_file: str | None = None, progress: Progress = silent) -> TestResult:
        spec.require_builtin("the model test")
        if model_file is None:
            model_file = spec.model_file
        if model_file is None:
            raise BackendError(
                "which model? no --model-file and no model_file in the spec",
                "pass --run RUN (its saved model) or --model-file PATH",
            )
        return as_test_result(
            self._trainer_tool(
                "torchdeck.trainer.evaluate",
                ["--model-file", model_file, "--data-dir", spec.data_dir, "--device", spec.device, "--output", "json"],
                progress,
            )
        )

    def run_spec(self, run_id: str) -> JobSpec:
        return self.model_file_of(run_id)[0]

    def model_file_of(self, run_id: str) -> tuple[JobSpec, str]:
        """A finished run's spec and where its model was saved."""
        from .spec import load_spec

        run_dir = self.resolve(run_id)
        spec = load_spec(run_dir / "spec.yaml")
        return spec, spec.model_file or str(Path(spec.checkpoint_dir or run_dir / "checkpoints") / "model.pt")

    def resume(
        self, run_id: str, avoid_nodes: Sequence[str] = (), trust_label: bool = False, progress: Progress = silent
    ) -> tuple[str, JobSpec]:
        """Start the run that continues ``run_id``: once. Two consoles resuming the same run at the
        same moment make one run; the other is told which (a lock on the run's folder)."""
        import fcntl

        run_dir = self.resolve(run_id)
        with open(run_dir / ".resume.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self._status_of(run_dir).state.is_terminal:
                raise BackendError(f"{run_dir.name} is still running", f"`torchdeck stop {run_dir.name}` first")
            earlier = resumed_by(run_dir)
            if earlier and (self.runs_dir / earlier / "launch.json").exists():
                if not self._status_of(self.runs_dir / earlier).state.is_terminal:
                    raise BackendError(
                        f"{run_dir.name} is being resumed already, as {earlier}", f"`torchdeck monitor {earlier}`"
                    )
            spec = self.resume_spec(run_dir.name, avoid_nodes)
            new = self.submit(spec, progress)
            write_atomically(run_dir / "resumed-by", new)
        return new, spec

    def resume_spec(self, run_id: str, avoid_nodes: Sequence[str] = (), trust_label: bool = False) -> JobSpec:
        """The run's spec, its snapshots folder named: the trainer resumes from the newest good one."""
        import dataclasses

        from .spec import load_spec

        if avoid_nodes:
            raise BackendError(
                f"a local run has one node, this machine ({socket.gethostname()}): there is no other to move to",
                "resume it without --avoid-node; --avoid-node is for runs on a cluster",
            )
        run_dir = self.resolve(run_id)
        spec = load_spec(run_dir / "spec.yaml")
        folder = Path(spec.checkpoint_dir or run_dir / "checkpoints")
        if not any(folder.glob("ckpt-*.pt")):
            raise BackendError(f"{run_dir.name} left no checkpoint in {folder}", "train it again from the start")
        return dataclasses.replace(spec, checkpoint_dir=str(folder), resumes=run_dir.name)

    def node_metrics(self, run_id: str) -> builtins.list[NodeMetrics]:
        run_dir = self.resolve(run_id)
        vm = psutil.virtual_memory()
        gpus, note = read_gpus()
        node = NodeMetrics(
            name=socket.gethostname(),
            cpu_percent=psutil.cpu_percent(None),
            cpu_count=psutil.cpu_count() or 1,
            mem_used_mb=(vm.total - vm.available) / 2**20,
            mem_total_mb=vm.total / 2**20,
            gpus=gpus,
            gpu_note=note,
            hosts=[socket.gethostname()],
        )
        launcher = self._launcher(run_dir)
        if launcher is None:
            return [node]
        with contextlib.suppress(psutil.Error):
            try:
                in_image = (read_typed(LaunchRecord, run_dir / "launch.json") or LaunchRecord()).in_image
            except RunRecordError:
                in_image = None
            # ranks in a container are no children of the launcher (the engine starts them), but
            # this machine sees them, with the run's id in their environment
            members = run_members(run_dir.name) if in_image else launcher.children(recursive=True)
            for proc in members:
                cached = self._procs.setdefault(proc.pid, proc)
                try:
                    rank = cached.environ().get("RANK")
                    if rank is None or cached.name() == "sh":
                        continue
                    with cached.oneshot():
                        node.processes.append(
                            ProcessMetrics(
                                rank=int(rank),
                                pid=proc.pid,
                                cpu_percent=cached.cpu_percent(None),
                                rss_mb=cached.memory_info().rss / 2**20,
                            )
                        )
                except (psutil.Error, ValueError):
                    self._procs.pop(proc.pid, None)
        node.processes.sort(key=lambda p: p.rank)
        return [node]


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def resumed_by(run_dir: Path) -> str:
    """The run that resumed this one, as its ``resumed-by`` file names it ("" where none, or where
    the file names no run id)."""
    try:
        text = read_bytes(run_dir / "resumed-by", 256).decode(errors="replace").strip()
        return check_run_id(text) if text else ""
    except (FileNotFoundError, SpecError):
        return ""


def killed_words(code: int) -> str:
    """How torchrun ended from its exit code: the signal that killed it (a negative code, or
    128 + the signal as a shell reports it), else the code."""
    if code < 0 or code > 128:
        with contextlib.suppress(ValueError):
            return f"torchrun was killed by {signal.Signals(-code if code < 0 else code - 128).name}"
    return f"torchrun exited with code {code}"
