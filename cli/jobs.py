"""The headless sub-commands (train, jobs, status, logs, stop, init) and the
one place where their errors become a single line on stderr."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from torchdeck.backends import BACKENDS, job_adoption, open_backend
from torchdeck.backends.base import Backend, GateStep, JobState, JobStatus, TestResult
from torchdeck.backends.capabilities import BudgetChange, CifarTasks, HangTriage, HealthGate, NodeCordon
from torchdeck.backends.errors import BackendError, RunNotFound, SpecError
from torchdeck.backends.files import read_stdin_text, read_text, size_words
from torchdeck.backends.health import GateResult
from torchdeck.backends.spec import (
    JobKindName,
    JobSpec,
    load_spec,
    parse_override,
    save_spec,
    spec_options,
    spec_reference,
    with_overrides,
)
from torchdeck.backends.spec_options import MAX_JOB_NAME
from torchdeck.monitor.state import MonitorSnapshot, MonitorState, format_duration, status_cells
from torchdeck.settings import Settings, SettingsError
from torchdeck.terminal import as_shown, printable
from torchdeck.trainer.metrics import strict_json

from .console import settings_of
from .output import EXIT_ERROR, EXIT_USAGE, ask, fail, say


def dispatch(args: argparse.Namespace) -> int:
    try:
        settings = settings_of(args)
        command = args.command
        if command == "init":
            return cmd_init(args)
        if command == "render":
            return cmd_render(args, settings)
        if command == "import":
            return cmd_import(args, settings)
        if command == "cluster":
            from .cluster import dispatch_cluster

            return dispatch_cluster(args, settings)
        if command == "storage":
            from .storage import dispatch_storage

            return dispatch_storage(args, settings)
        if command == "image":
            from .image import cmd_image

            return cmd_image(args, settings)
        if command in ("model", "cleanup", "resources"):
            from .resources import dispatch_resources

            return dispatch_resources(args, settings)
        backend = open_backend(settings.backend, settings)
        if command in ("nodes", "queues"):
            from .fleet import cmd_nodes, cmd_queues

            return (cmd_nodes if command == "nodes" else cmd_queues)(args, settings, backend)
        return {
            "train": cmd_train,
            "data": cmd_data,
            "test": cmd_test,
            "jobs": cmd_jobs,
            "status": cmd_status,
            "triage": cmd_triage,
            "resume": cmd_resume,
            "check": cmd_check,
            "compare": cmd_compare,
            "logs": cmd_logs,
            "stop": cmd_stop,
            "budget": cmd_budget,
        }[command](args, settings, backend)
    except (BackendError, SettingsError) as exc:
        return fail(str(exc), EXIT_USAGE if isinstance(exc, SpecError) else EXIT_ERROR)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `torchdeck logs RUN | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a file the user named that cannot be read or written: one line, not a traceback
        where = exc.filename or "a file"
        return fail(f"{where}: {exc.strerror or exc} (check the path, and that its folder exists and is writable)")


def cmd_init(args: argparse.Namespace) -> int:
    if args.reference:
        print(spec_reference())
        return 0
    path = Path(args.path)
    if os.path.lexists(path) and not args.force:  # a link, dangling or not, is something there
        return fail(f"{path} exists; pass --force to overwrite it")
    spec = JobSpec()
    if args.script or args.module:
        where = path.resolve().parent  # the code folder is written relative to the spec's
        entry = entrypoint_fields(args.script, args.module, getattr(args, "script_args", []), where)
        code = Path(entry.pop("entrypoint.code"))
        entry["entrypoint.code"] = os.path.relpath(code, where)
        spec = with_overrides(spec, entry)
    save_spec(spec, path, replace=args.force)
    print(f"wrote {path} ({spec.program}); edit it, then `torchdeck train {path}`")
    return 0


def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    from torchdeck.backends.kubernetes.importing import import_manifest

    path = Path(args.output)
    if os.path.lexists(path) and not args.force:
        return fail(f"{path} exists; pass --force to overwrite it, or -o another path")
    live = live_job(args.file)
    if live is not None:  # a job in the cluster: read there, then followed as a run of its own
        key, name, namespace = live
        spec, notes, run_id = job_adoption(settings).adopt(
            key, name, namespace or args.namespace, lambda read: save_spec(read, path, replace=args.force)
        )
    else:
        hint = "a manifest is a YAML file (kubectl get pytorchjob NAME -o yaml), or KIND/NAME of a job in the cluster"
        try:
            text = read_stdin_text(hint) if args.file == "-" else read_text(args.file, hint=hint)
        except FileNotFoundError:
            return fail(f"{args.file}: no such file (a job in the cluster: pytorchjob/NAME, mpijob/NAME or job/NAME)")
        found = import_manifest(text, "standard input" if args.file == "-" else args.file)
        spec, notes = found.spec, found.notes
        save_spec(spec, path, replace=args.force)
    e = spec.entrypoint
    where = f" in the image at {e.in_image}" if e.in_image else ""
    print(printable(f"wrote {path}: {spec.program}{where}, {spec.nodes} node(s) x "
                    f"{spec.nproc_per_node}, kind {spec.cluster.kind}"))  # fmt: skip
    for note in notes:  # the manifest's strings: nothing in them drives the terminal
        print(printable(f"  note: {note}"))
    if live is not None:
        print(f"following {live[1]} as run {run_id}: torchdeck --backend kubernetes status {run_id} (or logs, "
              "monitor, stop), as any run of its own")  # fmt: skip
        return 0
    print(f"next: torchdeck render {path} (check it), then torchdeck --backend kubernetes train {path}")
    return 0


def live_job(word: str) -> tuple[JobKindName, str, str | None] | None:
    """``KIND/NAME`` or ``KIND/NAMESPACE/NAME`` (a job's reference, as ``jobs`` lists another's; the
    kind as kubectl names it: plural and with its group too, pytorchjobs.kubeflow.org, jobs.batch)
    where no file of that name exists; None: a file. Which kinds are read from a cluster is theirs
    to say (``JobKind.live``)."""
    from torchdeck.backends.kubernetes.kinds import live_kind, live_words

    if os.path.lexists(word) or word.count("/") not in (1, 2):
        return None
    parts = word.split("/")
    kind, name = parts[0], parts[-1]
    key = live_kind(kind)
    if key is None:
        raise SpecError("", f"{word}: no such file, and {kind} is not a kind torchdeck imports from a cluster",
                        f"{live_words()}; a manifest file by its path")  # fmt: skip
    return key, name, parts[1] if len(parts) == 3 else None


def entrypoint_fields(script: str | None, module: str | None, script_args: list[str], cwd: Path) -> dict[str, Any]:
    """The entrypoint of ``torchdeck train SCRIPT`` or ``--module M``, as torchrun takes them: the
    code folder is the current folder (or the script's own folder where it lies outside it), or the
    project it is part of, run from that folder (``entrypoint.workdir``)."""
    from torchdeck.backends.bundle import project_root

    fields: dict[str, Any] = {"entrypoint.code": str(cwd)}
    if script:
        path = (cwd / script).resolve()
        if path.is_relative_to(cwd):
            fields["entrypoint.script"] = str(path.relative_to(cwd))
        else:
            fields["entrypoint.code"], fields["entrypoint.script"] = str(path.parent), path.name
        # a script inside a project (a git root, a pyproject.toml or setup.py above it) ships with it
        # all, so that its imports of the project's packages resolve in the pods as they do here
        here = Path(fields["entrypoint.code"])
        root = project_root(here)
        if root is not None and root != here and here.is_relative_to(root):
            fields["entrypoint.code"] = str(root)
            fields["entrypoint.script"] = str(path.relative_to(root))
            fields["entrypoint.workdir"] = str(here.relative_to(root))
    if module:
        fields["entrypoint.module"] = module
    if script_args:
        fields["entrypoint.args"] = list(script_args)
    return fields


def job_name_for(program: str) -> str:
    """A job name from a script's or module's name (train_resnet.py: train-resnet)."""
    name = re.sub(r"[^a-z0-9]+", "-", program.lower()).strip("-")
    name = re.sub(r"^[^a-z]+", "", name)[:MAX_JOB_NAME].rstrip("-")
    return name or "job"


def spec_for(args: argparse.Namespace, settings: Settings) -> JobSpec:
    """The spec file (or the defaults) with the command line's overrides. A script (``train.py``)
    in the spec's place, or ``--module``, runs that code and starts from the defaults."""
    script = args.spec if args.spec and args.spec.endswith(".py") else None
    module = getattr(args, "module", None)
    spec_file = None if script else args.spec
    path = spec_file or (settings.spec_file if settings.spec_file.exists() and not module and not script else None)
    spec = load_spec(path) if path else JobSpec()
    overrides: dict[str, Any] = {}
    if script or module:
        overrides.update(entrypoint_fields(script, module, getattr(args, "script_args", []), Path.cwd()))
        overrides["name"] = job_name_for(Path(script).stem if script else str(module).rsplit(".", 1)[-1])
    elif getattr(args, "script_args", []):
        overrides["entrypoint.args"] = list(args.script_args)
    for opt in spec_options():  # each flag is its field's (backends/spec.py declares both)
        value = getattr(args, opt.name, None) if opt.option.flag else None
        if value is None or opt.path == "entrypoint.module":  # a module came in with the entrypoint above
            continue
        if opt.option.local_path and "://" not in value:
            value = str(Path(value).expanduser().resolve())
        overrides[opt.path] = value
    for item in args.set:
        key, value = parse_override(item)
        overrides[key] = value
    return with_overrides(spec, overrides) if overrides else spec


def cmd_render(args: argparse.Namespace, settings: Settings) -> int:
    """The plan a cluster's submit makes, made offline (``offline_plan``): the same objects as
    ``train --dry-run`` for the same time, name and release, with no cluster asked."""
    from torchdeck.backends import render_plan, validate_plan

    plan = render_plan(spec_for(args, settings), settings, args.run_id, args.release)
    if args.validate:
        checked = validate_plan(plan)
        if checked.problems:
            for line in checked.problems:
                say(f"invalid: {line}")
            return EXIT_ERROR
        against = f" (against {'; '.join(checked.checked_against)})" if checked.checked_against else ""
        say(f"{len(plan.objects)} object(s) valid{against}")
        if checked.cel_unchecked:
            say(f"{checked.cel_unchecked} CEL rule(s) not checked here (pip install cel-python)")
    print(plan.text(full=args.output == "yaml"), end="")
    return 0


def cmd_data(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    ready = backend.require(CifarTasks).prepare_data(spec_for(args, settings), progress=say, source=args.from_s3)
    if args.output == "json":
        print(strict_json(ready.to_dict()))
    else:
        print(f"CIFAR-10 ready in {ready.path}: {ready.train_images} training and {ready.test_images} test images")
    return 0


def format_test_report(result: TestResult) -> str:
    """Accuracy overall and per class, with a bar each (as the model test job's report)."""
    lines = [f"accuracy on {result['images']} test images: {100 * result['accuracy']:.1f}%", ""]
    width = max((len(name) for name in result["per_class"]), default=5)
    for name, row in result["per_class"].items():
        filled = round(20 * row["accuracy"])
        lines.append(
            f"  {name:<{width}}  {100 * row['accuracy']:5.1f}%  {'#' * filled}{'.' * (20 - filled)}"
            f"  of {row.get('images', '?')} images"
        )
    return "\n".join(lines)


def cmd_test(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    model_file = args.model_file
    tasks = backend.require(CifarTasks)
    if args.run:
        spec, saved = tasks.model_file_of(args.run)
        model_file = model_file or saved
        spec = with_overrides(spec, {"data_dir": args.data_dir}) if args.data_dir else spec
    else:
        spec = spec_for(args, settings)
    result = tasks.test_model(spec, model_file, progress=say)
    print(strict_json(result) if args.output == "json" else format_test_report(result))
    return 0


def cmd_train(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    if getattr(args, "resume", None):  # train --resume RUN: resume RUN, as before there was resume
        args.run, args.avoid_node = args.resume, []
        return cmd_resume(args, settings, backend)
    spec = spec_for(args, settings)
    if args.dry_run:  # the plan that a submit applies, as it would apply it
        print(backend.plan(spec).text(full=args.output == "yaml"), end="")
        return 0
    if args.output == "yaml":
        return fail("--output yaml is the plan's objects whole: give it with --dry-run", EXIT_USAGE)
    # the plan's steps (the health gate first, where the spec asks for it) say what they wait for
    return started(args, backend, backend.submit(spec, progress=say), spec)


def cmd_resume(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    """Continue an ended run from its newest checkpoint as a new run that names it (its lineage),
    kept off the nodes given; says what it will submit (where, which image and identity, which code)
    and from which step, and how many steps the restart does again, before it submits."""
    from torchdeck.backends.run_digest import DigestStore, digest_of, restart_words, resume_plan_lines

    try:
        trust = trusted(args, backend.status(args.run), "resume")
    except RunNotFound:
        trust = False  # a stopped run's job is gone: resumed from what torchdeck recorded, or refused
    spec = backend.resume_spec(args.run, args.avoid_node, trust)
    if args.dry_run:
        print(backend.plan(spec).text(full=args.output == "yaml"), end="")
        return 0
    if args.output == "yaml":
        return fail("--output yaml is the plan's objects whole: give it with --dry-run", EXIT_USAGE)
    try:
        digest = digest_of(backend, DigestStore(settings.state_dir), backend.status(spec.resumes or args.run))
        where = restart_words(digest.max_step, digest.checkpoint_step)
    except BackendError:  # a cluster run whose job is gone: its steps went with its pods' logs
        where = "from its newest checkpoint (its logs are gone: the steps lost are not known)"
    for line in resume_plan_lines(spec, where):
        say(line)
    run_id, spec = backend.resume(args.run, args.avoid_node, trust, progress=say)
    avoiding = f", kept off {', '.join(spec.cluster.avoid_nodes)}" if spec.cluster.avoid_nodes else ""
    say(f"{run_id} resumes {spec.resumes} {where}{avoiding}")
    if not spec.builtin:
        say("your script starts again from the top: it resumes only where it loads its own checkpoints")
    return started(args, backend, run_id, spec)


def trusted(args: argparse.Namespace, status: JobStatus, verb: str) -> bool:
    """Whether to act on a run found by its label alone: the user says so (``--yes``, or yes when
    asked on a terminal); False for a run torchdeck recorded making (nothing to ask)."""
    if not status.found_by_label or status.made_by:  # another's job: the backend refuses it in one line
        return False
    say(
        f"{status.run_id} ({status.location}) was found by its label only: torchdeck has no record of "
        "making it here (made from another machine, or by someone else with torchdeck's labels)"
    )
    if args.yes or ask(f"{verb} it anyway? [y/N] "):
        return True
    raise BackendError(
        f"{status.run_id} was not {verb}{'ped' if verb == 'stop' else 'd'}",
        f"torchdeck {verb} {status.run_id} --yes, if it is yours",
    )


def started(args: argparse.Namespace, backend: Backend, run_id: str, spec: JobSpec) -> int:
    """A run just submitted: its id (``--detach``), or its progress until it ends."""
    if args.detach:
        print(strict_json({"run_id": run_id}) if args.output == "json" else run_id)
        return 0
    say(f"run {run_id} started ({spec.world_size} ranks); Ctrl-C detaches, the job keeps running")
    # the progress block's own redraw sequences go to the terminal itself, past the guard
    return follow_run(backend, run_id, args.output, getattr(sys.stdout, "terminal", sys.stdout))


def _bar(fraction: float, width: int = 24) -> str:
    filled = int(round(fraction * width))
    return "[" + "#" * filled + "." * (width - filled) + "]"


def progress_lines(snap: MonitorSnapshot, max_ranks: int = 8) -> list[str]:
    """The progress bar and per-rank summaries as plain text."""
    epochs = f"{snap.epoch}/{snap.epochs}" if snap.epochs else str(snap.epoch)
    steps = f"{snap.step}/{snap.total_steps}" if snap.total_steps else str(snap.step)
    acc = f"  acc {snap.evals[-1][1] * 100:.1f}%" if snap.evals else ""
    lines = [
        f"{_bar(snap.fraction)} {snap.fraction * 100:3.0f}%  epoch {epochs}  step {steps}  "
        f"ETA {format_duration(snap.eta_s)}  restarts {snap.restarts}{acc}"
    ]
    rows = sorted(snap.ranks, key=lambda r: (r.flag not in ("slow", "silent", "error"), r.rank))
    for row in sorted(rows[:max_ranks], key=lambda r: r.rank):
        loss = "-" if row.loss is None else f"{row.loss:.4f}"
        speed = "-" if row.samples_per_s is None else f"{row.samples_per_s:.0f}"
        flag = (
            f"  {row.flag.upper()}" + (f" ({row.detail})" if row.detail else "")
            if row.flag and row.flag != "done"
            else ""
        )
        lines.append(f"  rank {row.rank:<3} step {row.step:<6} loss {loss:<8} {speed:>6} {snap.speed_unit}{flag}")
    if len(rows) > max_ranks:
        lines.append(f"  ... and {len(rows) - max_ranks} more ranks")
    return lines


def summary(status: JobStatus, snap: MonitorSnapshot) -> dict[str, Any]:
    """The final summary `train --output json` prints."""
    done = snap.done or {}
    return {
        **status.to_dict(),
        "best_accuracy": snap.best_accuracy,
        "model_file": done.get("model_file"),
        "train_s": done.get("train_s"),
        "evals": [{"epoch": e, "accuracy": a} for e, a in snap.evals],
        "ranks": [
            {"rank": r.rank, "step": r.step, "loss": r.loss, "samples_per_s": r.samples_per_s, "flag": r.flag}
            for r in snap.ranks
        ],
        "errors": snap.errors,
    }


FINAL_STATUS_WAIT_S = 120.0
"""How long ``train`` waits, once a run's output has ended, for its end to be recorded."""


def follow_run(backend: Backend, run_id: str, output: str, out: TextIO) -> int:
    """Print progress until the run ends; exit 0 if it succeeded."""
    state = MonitorState()
    tty = out.isatty() and output == "text"
    shown_lines, drawn_at = 0, 0.0
    printed = (-1, -1)  # (epoch, evals) of the last line printed when not a terminal

    def draw(final: bool = False) -> None:
        nonlocal shown_lines, drawn_at, printed
        snap = state.snapshot()
        if tty:
            if not final and time.monotonic() - drawn_at < 0.5:
                return
            lines = progress_lines(snap)
            if shown_lines:
                out.write(f"\x1b[{shown_lines}F\x1b[J")  # back over the last block, then redraw it
            out.write("\n".join(lines) + "\n")
            out.flush()
            shown_lines, drawn_at = len(lines), time.monotonic()
        elif output == "text":
            # Not a terminal: a line per finished epoch and eval, no redrawing.
            if (snap.epoch, len(snap.evals)) != printed or final:
                printed = (snap.epoch, len(snap.evals))
                out.write(progress_lines(snap, max_ranks=0)[0] + "\n")
                out.flush()

    async def consume() -> None:
        async for batch in backend.metrics(run_id, follow=True):
            state.ingest(batch)
            draw()

    try:
        asyncio.run(consume())
    except KeyboardInterrupt:
        print(
            f"\ntorchdeck: detached; the run goes on. `torchdeck monitor {run_id}` watches it, "
            f"`torchdeck stop {run_id}` stops it",
            file=sys.stderr,
        )
        return 130
    status = backend.status(run_id)
    # the stream ended with the ranks: the launcher (or the operator) records how the run ended
    # next, which on a loaded host takes seconds; a run still shown as going on after this long is
    # reported as it stands
    settled = time.monotonic() + FINAL_STATUS_WAIT_S
    while not status.state.is_terminal and time.monotonic() < settled:
        time.sleep(0.2)
        status = backend.status(run_id)
    snap = state.snapshot()
    if output == "json":
        out.write(strict_json(summary(status, snap), indent=2) + "\n")
    else:
        draw(final=True)
        acc = (
            f", accuracy {snap.evals[-1][1] * 100:.2f}% (best {(snap.best_accuracy or 0.0) * 100:.2f}%)"
            if snap.evals
            else ""
        )
        out.write(f"{run_id}: {status.state.value}{acc}\n")
    if status.state is not JobState.SUCCEEDED:
        reason = status.reason or status.state.value
        print(
            printable(
                f"torchdeck: error: {run_id} {status.state.value}: {reason}"
                + (f" (hint: {status.hint})" if status.hint else "")
            ),
            file=sys.stderr,
        )
        return EXIT_ERROR
    return 0


REASON_WIDTH = 60
"""Characters of a reason in the runs table; ``status RUN`` shows it whole."""


def format_status_table(statuses: list[JobStatus], reasons: bool = True) -> str:
    """The runs table; a cluster's jobs also say where each is, its queue and who made it."""
    from torchdeck.monitor.state import place_cells

    placed = any(s.kind for s in statuses)
    head: tuple[str, ...] = ("RUN", "STATE", *(("WHERE", "QUEUE", "BY") if placed else ()))
    head += ("RANKS", "EPOCH", "STEP", "LOSS", "ACC", "AGE", "COST")
    rows: list[tuple[str, ...]] = [(*head, "REASON") if reasons else (*head, "")]
    now = time.time()
    # a run's reason and its names come from the run, the cluster or a file: nothing in them drives the terminal
    for s in statuses:
        reason = s.reason if len(s.reason) <= REASON_WIDTH else s.reason[: REASON_WIDTH - 3] + "..."
        run, state, *figures = status_cells(s, now)
        cells = (run, state, *(place_cells(s) if placed else ()), *figures, reason if reasons else "")
        rows.append(tuple(printable(c) for c in cells))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows)


def cmd_jobs(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    from torchdeck.monitor.state import SORTS, RowFilter

    wanted = RowFilter(args.namespace or "", args.mine, args.queue or "", args.state or "")
    listed = backend.list()
    statuses = sorted((s for s in listed if wanted.keeps(s)), key=SORTS[args.sort])
    for line in backend.unseen():  # what this identity could not list: said, and the rest shown
        say(f"note: {line}")
    if args.output == "json":
        print(strict_json([s.to_dict() for s in statuses], indent=2))
    elif not statuses:
        print(
            f"no jobs here match {wanted.words()} (of {len(listed)})"
            if listed
            else "no runs yet; `torchdeck train` starts one"
        )
    else:
        print(format_status_table(statuses))
        for status in statuses:  # a node lost under a live run, as status says it
            for node, why in status.bad_nodes.items():
                if not status.state.is_terminal:
                    print(printable(f"node lost under {status.run_id}: {node}: {why}"))
    return 0


def trainer_status_words(trainer: dict) -> str:
    """A TrainJob's ``status.trainerStatus`` in a line: 100% done, 0 s left, step=10 loss=0.52."""
    parts = []
    if trainer.get("progressPercentage") is not None:
        parts.append(f"{trainer['progressPercentage']}% done")
    if trainer.get("estimatedRemainingSeconds") is not None:
        parts.append(f"{trainer['estimatedRemainingSeconds']} s left")
    metrics = " ".join(f"{m.get('name')}={m.get('value')}" for m in trainer.get("metrics") or [])
    return ", ".join(parts + ([metrics] if metrics else [])) + (
        f" (updated {trainer['lastUpdatedTime']})" if trainer.get("lastUpdatedTime") else ""
    )


def cmd_status(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    status = backend.status(args.run)
    if args.output == "json":
        print(strict_json(status.to_dict(), indent=2))
        return 0
    print(format_status_table([status], reasons=False).rstrip())
    if status.made_by:  # another's job: followed read-only
        print(
            printable(f"not torchdeck's: made by {status.made_by}, shown read-only (torchdeck import makes it a run)")
        )
    elif status.found_by_label:
        print(
            printable(
                f"found by label: torchdeck has no record of making {status.run_id} here ({status.location}); "
                "stop and resume ask first"
            )
        )
    if status.reason:  # whole: the table's column would cut the words that say why
        print(printable(f"reason: {status.reason}"))
    queue = status.queue
    if queue is not None and queue.admitted_at:  # submitted through Kueue, and let through
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(queue.admitted_at))
        print(printable(f"queue: admitted from {queue.local_queue} at {when}"))
    if status.trainer_status:  # what Kubeflow Trainer's own status says (its UI shows the same)
        print(printable(f"trainer status: {trainer_status_words(status.trainer_status)}"))
    if status.cost is not None:
        print(printable(f"cost: {status.cost.words()}"))
    if status.hint:
        print(printable(f"hint: {status.hint}"))
    for warning in status.warnings:
        print(printable(f"warning: {warning}"))
    for node, why in status.bad_nodes.items():  # while it runs: a node lost under it, as the cluster says
        print(printable(f"{'bad node' if status.state.is_terminal else 'node lost'}: {node}: {why}"))
    for line in status.recovery:  # how it came back inside itself
        print(printable(f"recovery: {line}"))
    for line in status.coming_back:  # a rank on its way back
        print(printable(f"coming back: {line}"))
    if status.bad_nodes and status.state.is_terminal:
        avoid = " ".join(f"--avoid-node {n}" for n in status.bad_nodes)
        print(printable(f"resume: torchdeck resume {status.run_id} {avoid} (continues from its newest checkpoint)"))
    if status.triage is not None:
        when = time.strftime("%H:%M:%S", time.localtime(status.triage.time))
        print(printable(f"triage ({when}): {status.triage.summary}"))
    return 0


def cmd_check(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    """The health gate: each size's time and bandwidths between all the ranks, then (on a cluster)
    each node's own and each pair's, what each node is, and the nodes that fall short."""
    if args.uncordon:  # undo a cordon, and nothing else
        cordoning = backend.capability(NodeCordon)
        if cordoning is None:
            return fail("--uncordon is for a cluster's nodes (hint: --backend kubernetes)", EXIT_USAGE)
        for node in args.uncordon:
            if cordoning.uncordon(node):
                print(printable(f"uncordoned {node}: new pods may be scheduled there again"))
            else:
                print(printable(f"{node} was not cordoned: nothing to undo"))
        return 0
    if not 4096 <= args.max_bytes <= 1 << 32:
        return fail(f"--max-bytes {args.max_bytes}: give 4096 to 4294967296 (hint: --max-bytes 16777216)", EXIT_USAGE)
    spec = spec_for(args, settings)
    gate = backend.require(HealthGate)
    step = GateStep(max_bytes=args.max_bytes, dcgm_level=args.dcgm_level, timeout_s=args.timeout)
    result = gate.check(spec, step, progress=say)
    if args.output == "json":
        print(strict_json(result.to_dict(), indent=2))
    else:
        print(check_report(result))
    if args.cordon and result.short:
        nodes = backend.capability(NodeCordon)
        if nodes is None:
            return fail("--cordon is for a cluster's nodes (hint: --backend kubernetes)", EXIT_USAGE)
        for node in result.short:
            if args.yes or ask(f"cordon {node} (nothing new is scheduled there; what runs stays)? [y/N] "):
                nodes.cordon(node)
                print(printable(f"cordoned {node} (torchdeck check --uncordon {node} undoes it)"))
    return 0


def check_report(result: GateResult) -> str:
    """The gate's answer as text: the sweep between every rank, each node, each pair, the verdict."""
    out = [
        f"all-reduce between {result.world_size} ranks ({result.backend}, on {', '.join(sorted(set(result.hosts)))})"
    ]
    out.append(f"{'size':>10} {'time':>10} {'algbw':>12} {'busbw':>12}")
    for row in result.rows:
        out.append(
            f"{size_words(row['bytes']):>10} {row['time_s'] * 1e3:>8.2f} ms {row['algbw_gbps']:>7.3f} GB/s "
            f"{row['busbw_gbps']:>7.3f} GB/s"
        )
    peak = result.peak()
    out.append(f"peak bus bandwidth {peak['busbw_gbps']:.3f} GB/s at {size_words(peak['bytes'])}")
    nodes, types = result.nodes, result.instance_types
    if len(nodes) > 1 or any(gpus.get("count") for n in nodes if (gpus := n.get("gpus"))):
        out.append("")
        out.append(f"{'node':<40} {'type':<14} {'ranks':>5} {'own busbw':>11} {'GFLOP/s':>8}  GPUs  DCGM  EFA")
        for n in nodes:
            intra = n.get("intra")
            own = intra["busbw_gbps"] if intra else None
            gpus = n.get("gpus", {})
            dcgm = n.get("dcgm", {})
            dcgm_cell = ("fail" if dcgm.get("failed") or dcgm.get("error") else "pass") if dcgm.get("ran") else "-"
            devices = n.get("efa")
            efa = len(devices.get("devices") or []) if devices else 0
            name = n.get("node", "?")
            out.append(
                f"{name[:40]:<40} {types.get(name, '-'):<14} {len(n.get('ranks') or []):>5} "
                + (f"{own:>6.3f} GB/s" if own is not None else f"{'-':>11}")
                + (f" {compute['gflops']:>8.1f}" if (compute := n.get("compute")) else f" {'-':>8}")
                + f"  {gpus.get('count', 0):>4}  {dcgm_cell:>4}  {efa:>3}"
            )
    pairs = [(p, link) for p in result.pairs if (link := p.get("result"))]
    if pairs:
        out.append("")
        out.append(f"between nodes ({size_words(pairs[0][1]['bytes'])}, first rank of each):")
        for p, link in pairs:
            out.append(f"  {p.get('a')} <-> {p.get('b')}: {link['busbw_gbps']:.3f} GB/s")
    out.append("")
    if result.short:
        for node, why in result.short.items():
            out.append(f"falls short: {node}: {why}")
        out.append(
            "the run can be kept off them: --avoid-node on resume, cluster.avoid_nodes in the spec, or train --check"
        )
    else:
        out.append(f"every node passed ({len(nodes) or 1} measured)")
    return printable("\n".join(out))


def cmd_triage(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    """Ask a running run's ranks where they are; the verdict is kept with the run (``status``)."""
    if not 0 < args.wait <= 600:
        return fail(f"--wait {args.wait:g}: give seconds from 0 to 600 (hint: --wait 5)", EXIT_USAGE)
    verdict = backend.require(HangTriage).triage(args.run, args.wait)
    if args.output == "json":
        print(strict_json(verdict.to_dict(), indent=2))
        return 0
    print(printable(verdict.summary))
    for r in verdict.ranks:
        collective = r.collective.words() + ("" if r.collective.completed else ", in flight") if r.collective else "-"
        print(
            printable(
                f"  rank {r.rank:<3} {r.where:<24} {r.waiting_in or '-':<14} {collective}  ({r.node}, pid {r.pid})"
            )
        )
    if verdict.flight_recorder_note:
        print(printable(f"flight recorder: {verdict.flight_recorder_note}"))
    print(printable(f"dumps: {verdict.folder}"))
    return 0


def cmd_compare(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    from torchdeck.backends.run_digest import DigestStore
    from torchdeck.monitor.compare import ComparedRun, Comparison, format_rows, load_run

    if len(args.runs) < 2:
        return fail("compare needs two runs or more (hint: `torchdeck jobs` lists them)", EXIT_USAGE)
    store = DigestStore(settings.state_dir)
    opened = {settings.backend: backend}

    def load(ref: str) -> ComparedRun:  # BACKEND:RUN is a run of another backend (a run id never holds a colon)
        name, colon, run_id = ref.partition(":")
        if not colon:
            return load_run(backend, store, ref)
        if name not in BACKENDS:
            raise BackendError(
                f"no backend {name!r} in {ref!r}", f"write BACKEND:RUN, BACKEND one of {', '.join(BACKENDS)}"
            )
        if name not in opened:
            opened[name] = open_backend(name, settings)
        return load_run(opened[name], store, run_id)

    runs = [load(ref) for ref in args.runs]
    if len({(r.status.backend, r.status.run_id) for r in runs}) < len(runs):
        return fail("a run is named twice (hint: name each run once; a prefix may match a run named too)", EXIT_USAGE)
    comparison = Comparison(runs)
    if args.output == "json":
        print(strict_json(comparison.to_json(), indent=2))
        return 0
    for run in runs:  # which short name is which run, and how it ended
        end = f": {run.status.reason}" if run.status.reason else ""
        print(printable(f"{run.label:<16} {run.status.run_id} ({run.status.backend}, {run.status.state.value}{end})"))
    print()
    for line in format_rows(comparison.rows(), [r.label for r in runs]).splitlines():
        print(printable(line))
    recovered = comparison.recovery_lines()
    if recovered:  # a run that came back inside itself (a node lost, a pod made again): how, a line each
        print()
        for line in recovered:
            print(printable(f"recovered {line}"))
    print("\n* best of the row", file=sys.stderr)
    return 0


def cmd_logs(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    run_id = backend.status(args.run).run_id
    # on a terminal, a rank's escape sequences would drive it (a title, a cleared screen): shown as a
    # terminal would leave the line; to a pipe or file, or with --raw, the bytes as the rank wrote them
    shown = (lambda text: text) if args.raw or not sys.stdout.isatty() else as_shown
    out = getattr(sys.stdout, "terminal", sys.stdout) if args.raw else sys.stdout  # --raw: past the guard too
    for batch in backend.logs(run_id, rank=args.rank, follow=args.follow):
        for line in batch:
            restart = f" restart {line.attempt}" if line.attempt else ""
            prefix = f"[rank {line.rank}{restart}] " if args.rank is None or line.attempt else ""
            out.write(f"{prefix}{shown(line.text)}\n")
        out.flush()
    return 0


def cmd_budget(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    """Change a running run's budget; says what it has cost so far against the new one."""
    from torchdeck.backends.cost import dollars, money

    try:
        amount = money(args.amount, positive=True)
    except ValueError as exc:
        return fail(f"budget {exc} (hint: torchdeck budget RUN 12.50)", EXIT_USAGE)
    status = backend.require(BudgetChange).set_budget(backend.status(args.run).run_id, amount)
    spent = f"; {status.cost.words()}" if status.cost is not None else ""
    print(printable(f"{status.run_id}: budget {dollars(amount)}{spent}"))
    return 0


def cmd_stop(args: argparse.Namespace, settings: Settings, backend: Backend) -> int:
    status = backend.status(args.run)
    for warning in status.warnings:  # what stop refuses to signal, and why
        say(f"warning: {warning}")
    trust = trusted(args, status, "stop")
    if status.state.is_terminal:  # what it keeps on a cluster (its job, pods, logs) goes, as kubectl delete does
        removed = backend.discard(status.run_id, trust)
        gone = f"; deleted {', '.join(removed)} (its pods and logs go with it)" if removed else ""
        print(f"{status.run_id} already {status.state.value}{gone}")
        return 0
    status = backend.cancel(status.run_id, trust)
    ended = "every process that carries its id has ended" if status.warnings else "every process has ended"
    print(f"{status.run_id} {status.state.value}: {ended}")
    return 0
