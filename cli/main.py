"""The ``torchdeck`` command: with no sub-command it opens the console; each
screen also has a headless sub-command. Sub-commands import what they need
only when they run, so that ``torchdeck --help`` stays fast."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torchdeck import __version__

if TYPE_CHECKING:  # the sub-commands' type: its module is not loaded for --help
    from torchdeck.backends.states import JobState

    from .output import Commands

OVERVIEW = """\
torchdeck trains PyTorch models with DDP on this machine (torchrun), on
Kubernetes and on AWS EKS, and shows them live.

  torchdeck                        open the console (local backend)
  torchdeck init                   write a job spec, torchdeck.yaml
  torchdeck train --epochs 5       train on this machine, two ranks, with a progress bar
  torchdeck train train.py -- --lr 0.1
                                   your own script on every rank (its text is read as metrics)
  torchdeck import job.yaml        a spec from a PyTorchJob, ElasticJob, MPIJob or Job manifest
  torchdeck jobs                   list the runs (on a cluster: every training job you may see)
  torchdeck queues                 a cluster's Kueue queues: usage, who waits, in what order, why
  torchdeck nodes                  a cluster's nodes: room, use, training jobs, why one is bad
  torchdeck compare RUN RUN...     runs side by side: losses, what differs in their specs, cost
  torchdeck monitor RUN            watch a run in the console
  torchdeck logs RUN --rank 1 -f   follow one rank's output
  torchdeck stop RUN               stop a run and every process it started
  torchdeck triage RUN             a hung run: which rank is elsewhere, at which line, in which collective
  torchdeck resume RUN --avoid-node NODE
                                   continue a failed or stopped run from its checkpoint, off a sick node
  torchdeck check                  the health gate: all-reduce bandwidth between ranks, nodes and node pairs
  torchdeck test --run RUN         accuracy of a run's model, per class
  torchdeck render --kind job      print the Kubernetes manifests of the job
  torchdeck cluster init --name demo --region us-west-2 --worker gpu:g5.xlarge:0:2:4:gpu
                                   plan an EKS cluster: an eksctl ClusterConfig and its cost
  torchdeck cluster plan           check the plan against AWS (quotas, zones, cost)
  torchdeck cluster create         create it (eksctl, or torchdeck's own path), then connect
  torchdeck cluster status         the cluster, nodegroups and node readiness
  torchdeck storage create --bucket NAME
                                   EFS (or --kind fsx) with its claim, and a private model bucket
  torchdeck image build            build the training image and push it to ECR (Kaniko without Docker)
  torchdeck data prepare           put CIFAR-10 on the shared volume (checksum verified)
  torchdeck model get --run RUN    copy a trained model here
  torchdeck resources              what torchdeck made that exists, and its cost
  torchdeck cleanup                the teardown plan; --yes deletes it all
  torchdeck cluster delete         delete it and everything torchdeck made for it
"""


def _add_spec_overrides(p: argparse.ArgumentParser, spec_flags: bool = True) -> None:
    p.add_argument(
        "spec",
        nargs="?",
        help="job spec file (default: $TORCHDECK_SPEC or ./torchdeck.yaml if present), or a script "
        "(train.py: every rank runs it; arguments for it after --)",
    )
    if not spec_flags:  # a command line without a spec's command: the spec's module is not read
        return
    from torchdeck.backends.spec import spec_options

    code = p.add_argument_group("your code (instead of the built-in trainer)")
    overrides = p.add_argument_group("overrides (on top of the spec)")
    for opt in spec_options():  # every flag is declared once, with its field (backends/spec.py)
        o = opt.option
        if not o.flag:
            continue
        group = code if opt.path.startswith("entrypoint.") else overrides
        if opt.widget == "bool":
            group.add_argument(o.flag, dest=opt.name, action="store_const", const=True, help=o.help)
        else:
            metavar = "N" if opt.widget == "int" else o.flag.rpartition("-")[2].upper()  # --data-dir DIR
            help_text = o.help + (f" ({', '.join(o.choices)})" if o.choices and "," not in o.help else "")
            group.add_argument(
                o.flag,
                dest=opt.name,
                type=int if opt.widget == "int" else str,
                metavar=metavar,
                help=help_text,
            )
    g = overrides
    g.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="any spec field, e.g. --set trainer.seed=3 (repeatable)",
    )


def _add_global_options(parser: argparse.ArgumentParser, default: object = None) -> None:
    g = parser.add_argument_group("global options (before or after the command)")
    g.add_argument("--backend", default=default, help="where jobs run: local (default), kubernetes or eks")
    g.add_argument("--context", default=default, help="kubeconfig context (kubernetes backend)")
    g.add_argument("--ascii", action="store_const", const=True, default=default, help="draw with ASCII characters only")


class CommandParser(argparse.ArgumentParser):
    """A sub-command's parser: it takes the global options too, as kubectl does, without
    overwriting what was given before the command (their default there is 'not given')."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _add_global_options(self, default=argparse.SUPPRESS)


def build_parser(spec_flags: bool = True) -> argparse.ArgumentParser:
    """The parser; without ``spec_flags`` the spec commands lack their flags (the console starts
    without reading the spec's module: ``main`` asks for them where a spec command is named)."""
    parser = argparse.ArgumentParser(
        prog="torchdeck",
        description=OVERVIEW,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"torchdeck {__version__}")
    _add_global_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)

    sub.add_parser("console", help="open the console (the default)")
    add_spec_commands(sub, spec_flags)
    from .cluster import add_cluster_parser
    from .image import add_image_parser
    from .resources import add_resource_parsers
    from .storage import add_storage_parser

    add_cluster_parser(sub)
    add_storage_parser(sub)
    add_image_parser(sub)
    add_resource_parsers(sub)

    add_run_commands(sub, spec_flags)
    from .fleet import add_fleet_commands

    add_fleet_commands(sub)
    sub.add_parser("version", help="print the version")
    return parser


def add_spec_commands(sub: Commands, spec_flags: bool) -> None:
    """The commands that write a spec or run one: init, import, train, render, data, test."""
    p = sub.add_parser("init", help="write a job spec with every field and its default")
    p.add_argument("path", nargs="?", default="torchdeck.yaml")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.add_argument("--script", metavar="PY", help="a spec that runs this script (arguments for it after --)")
    p.add_argument("--module", metavar="M", help="a spec that runs python -m M")
    p.add_argument(
        "--reference", action="store_true", help="print every field as a Markdown table (docs/SPEC.md), write nothing"
    )

    p = sub.add_parser(
        "import",
        help="write a job spec from a PyTorchJob, ElasticJob, MPIJob or indexed Job manifest; "
        "KIND/NAME: from that job in the cluster, which torchdeck then follows as a run of its own",
    )
    p.add_argument(
        "file",
        help="the manifest (YAML; - reads standard input), or a job in the cluster: pytorchjob/NAME, mpijob/NAME, job/NAME",
    )
    p.add_argument("--namespace", help="KIND/NAME: the job's namespace (default: the context's)")
    p.add_argument("-o", "--output", default="torchdeck.yaml", metavar="PATH", help="the spec to write")
    p.add_argument("--force", action="store_true", help="overwrite an existing spec")

    p = sub.add_parser("train", help="launch a job and show its progress (the launch form, headless)")
    _add_spec_overrides(p, spec_flags)
    p.add_argument("--dry-run", action="store_true", help="print what would run, start nothing")
    p.add_argument("--detach", action="store_true", help="print the run id and return at once")
    p.add_argument(
        "--resume", metavar="RUN", help="local: run RUN's spec again from its newest checkpoint (after a crash)"
    )
    p.add_argument(
        "--output",
        choices=("text", "json", "yaml"),
        default="text",
        help="json: print the final summary as JSON; yaml (with --dry-run): the plan's objects whole",
    )

    p = sub.add_parser(
        "render", help="print the plan a cluster's submit makes, offline (--output yaml: for kubectl apply -f -)"
    )
    _add_spec_overrides(p, spec_flags)
    p.add_argument("--run-id", metavar="ID", help="the object name (default: the job name and the time, as a submit)")
    p.add_argument(
        "--release", metavar="RELEASE", help="the operator release to write for (default: the newest torchdeck knows)"
    )
    p.add_argument(
        "--output", choices=("text", "yaml"), default="text", help="yaml: every object whole, a code bundle's too"
    )
    p.add_argument(
        "--validate",
        action="store_true",
        help="check them against Kubernetes' schema and the operators' (needs kubernetes-validate)",
    )

    p = sub.add_parser("data", help="put CIFAR-10 where the job reads it (the data-prep job on a cluster)")
    dsub = p.add_subparsers(dest="data_command", metavar="COMMAND", required=True)
    p = dsub.add_parser(
        "prepare",
        help="the official archive (md5 checked) or a copy from S3, onto the data folder or the shared volume",
    )
    _add_spec_overrides(p, spec_flags)
    p.add_argument("--from-s3", metavar="S3_URL", help="copy from this prefix (the archive or cifar-10-batches-py/)")
    p.add_argument("--output", choices=("text", "json"), default="text")

    p = sub.add_parser("test", help="evaluate a trained model: accuracy per class (the model test job on a cluster)")
    _add_spec_overrides(p, spec_flags)
    p.add_argument("--run", metavar="RUN", help="test this run's saved model (where and how that run was set up)")
    p.add_argument("--output", choices=("text", "json"), default="text")


def add_jobs_command(sub: Commands, states: type[JobState]) -> None:
    """``jobs``: the runs, and on a cluster every training job, with its filters and orders."""
    p = sub.add_parser(
        "jobs",
        help="list runs and their state (the home screen, headless); on a cluster every training job "
        "you may see, others' too (read-only, by KIND/NAMESPACE/NAME)",
    )
    p.add_argument("--namespace", metavar="NS", help="only the jobs in namespace NS")
    p.add_argument("--mine", action="store_true", help="only torchdeck's runs, not the jobs others made")
    p.add_argument("--queue", metavar="Q", help="only the jobs submitted through Kueue's LocalQueue Q")
    p.add_argument("--state", choices=[s.value for s in states], help="only the jobs in this state")
    p.add_argument("--sort", choices=("age", "name", "state", "namespace", "queue"), default="age",
                   help="the order (age: the newest first)")  # fmt: skip
    p.add_argument("--output", choices=("text", "json"), default="text")


def add_run_commands(sub: Commands, spec_flags: bool) -> None:
    """The commands about runs and the nodes they run on: jobs, status, check, triage, resume,
    compare, logs, stop, budget, monitor."""
    from torchdeck.backends.records import GateStep  # the health gate's defaults, declared there once
    from torchdeck.backends.states import JobState

    add_jobs_command(sub, JobState)

    p = sub.add_parser("status", help="one run's state, progress and failure reason")
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument("--output", choices=("text", "json"), default="text")

    p = sub.add_parser(
        "check",
        help="the health gate: all-reduce bandwidth between ranks, nodes and pairs of nodes, and each node's GPUs",
    )
    _add_spec_overrides(p, spec_flags)
    p.add_argument(
        "--max-bytes", type=int, default=GateStep.max_bytes, metavar="B", help="the largest all-reduce (16 MiB)"
    )
    p.add_argument(
        "--timeout", type=float, default=GateStep.timeout_s, metavar="S", help="cluster: give up after S seconds"
    )
    p.add_argument(
        "--dcgm-level",
        type=int,
        choices=(0, 1, 2, 3),
        default=GateStep.dcgm_level,
        help="dcgmi diag -r LEVEL where the image has dcgmi",
    )
    p.add_argument("--cordon", action="store_true", help="cluster: offer to cordon each node that falls short")
    p.add_argument("--yes", action="store_true", help="with --cordon: cordon them without asking")
    p.add_argument("--uncordon", action="append", default=[], metavar="NODE", help="cluster: open NODE again; no check")
    p.add_argument("--output", choices=("text", "json"), default="text")

    p = sub.add_parser(
        "triage",
        help="ask a running run's ranks where they are: which is elsewhere, at which line, in which collective",
    )
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument("--wait", type=float, default=5.0, metavar="S", help="seconds to wait for the ranks' answers")
    p.add_argument("--output", choices=("text", "json"), default="text")

    p = sub.add_parser(
        "resume",
        help="continue a failed or stopped run from its newest checkpoint, as a new run of its lineage",
    )
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument(
        "--avoid-node",
        action="append",
        default=[],
        metavar="NODE",
        help="cluster: keep the new run's pods off this node (again for more; status names the bad ones)",
    )
    p.add_argument("--dry-run", action="store_true", help="print what would run, start nothing")
    p.add_argument("--detach", action="store_true", help="print the new run id and return at once")
    p.add_argument(
        "--output",
        choices=("text", "json", "yaml"),
        default="text",
        help="json: print the final summary as JSON; yaml (with --dry-run): the plan's objects whole",
    )
    p.add_argument("--yes", action="store_true", help="a run found by its label alone: resume it without asking")

    p = sub.add_parser(
        "compare", help="runs side by side: their losses, what differs in their specs, wall time, speed and cost"
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="run ids or unique prefixes (two or more); BACKEND:RUN for a run of another backend (local:ID, eks:ID)",
    )
    p.add_argument("--output", choices=("text", "json"), default="text")

    p = sub.add_parser("logs", help="print a run's output, every rank or one")
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument("--rank", type=int, help="only this rank")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the run ends")
    p.add_argument(
        "--raw",
        action="store_true",
        help="the output as the ranks wrote it, escape sequences and all (the default on a pipe or file)",
    )

    p = sub.add_parser(
        "stop", help="stop a run and every process it started (a cluster run that ended: delete what it keeps)"
    )
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument("--yes", action="store_true", help="a run found by its label alone: stop it without asking")

    p = sub.add_parser("budget", help="change a running run's budget (past it, the run stops with a snapshot)")
    p.add_argument("run", help="run id or a unique prefix")
    p.add_argument("amount", help="in USD: 12.50, $12.50")

    p = sub.add_parser("monitor", help="open the console's monitor on a run")
    p.add_argument("run", help="run id or a unique prefix")


SPEC_COMMANDS = {"train", "render", "data", "test", "check"}
"""The commands that take the spec's flags (``_add_spec_overrides``)."""


def main(argv: Sequence[str] | None = None) -> int:
    # Start-up allocates a great many objects that live as long as the process (the modules of
    # Textual, Rich and torchdeck): the cyclic collector would walk them again and again (about
    # 50 ms of the console's first frame here). It is off until the console has drawn (the app
    # freezes what start-up made, then turns it back on), or until a headless command has parsed.
    gc.disable()
    try:
        return _main(argv)
    finally:
        gc.enable()  # (a no-op after the console turned it on; in-process callers get it back)


def console_only(argv: list[str]) -> bool:
    """Whether the command line opens the console and asks nothing else (``torchdeck``,
    ``torchdeck --backend kubernetes``): then no command's parser is built."""
    words = iter(argv)
    for word in words:
        if word in ("--backend", "--context"):
            next(words, None)
        elif not word.startswith("--") or word in ("--help", "--version"):
            return False
    return True


def console_parser() -> argparse.ArgumentParser:
    """The console's command line: the global options alone."""
    parser = argparse.ArgumentParser(prog="torchdeck", add_help=False)
    _add_global_options(parser)
    return parser


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if console_only(argv):  # the first frame waits for no command's module
        args = console_parser().parse_args(argv)
        args.command, args.script_args = None, []
        from .console import run_console

        return run_console(args)
    parser = build_parser(spec_flags=bool(SPEC_COMMANDS & set(argv)))
    script_args: list[str] = []
    if "--" in argv:  # what follows is the user's script's own (torchdeck train train.py -- --lr 0.1)
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    args.script_args = script_args
    if args.command == "version":
        print(f"torchdeck {__version__}")
        return 0
    if (args.command or "console") in ("console", "monitor"):  # the console draws the terminal itself
        from .console import run_console

        return run_console(args)
    gc.enable()
    from torchdeck.terminal import guarded

    from . import jobs as headless

    with guarded():  # nothing a run, a cluster or a file wrote drives the terminal
        return headless.dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
