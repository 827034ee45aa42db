"""Issue 16 rows 4 and 10: every name that reaches a file path, an AWS resource or
a Kubernetes object is checked where it enters, by one shared set of checks
(backends/names.py), against moto so that what a hostile name would have made is
looked for, not assumed."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from torchdeck.backends import names
from torchdeck.backends.eks.access import ClusterRecord
from torchdeck.backends.eks.session import AwsSession
from torchdeck.backends.errors import SpecError
from torchdeck.cli.main import main
from torchdeck.settings import Settings, SettingsError

HOSTILE = ["../../../pwned", "demo\n", "a/b", "x y*", "*", "", "${aws:username}", "a\nb", "é", "-x", "x" * 300]


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize(
    "check", [names.check_cluster_name, names.check_namespace, names.check_service_account, names.check_run_id]
)
def test_every_check_refuses_hostile_names_in_one_line(check, value: str) -> None:
    with pytest.raises(SpecError) as info:
        check(value)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


@pytest.mark.parametrize(
    "check,value",
    [
        (names.check_cluster_name, "Demo-1"),
        (names.check_namespace, "team-a"),
        (names.check_service_account, "torchdeck-s3"),
        (names.check_run_id, "resnet-2"),
    ],
)
def test_every_check_takes_good_names(check, value: str) -> None:
    assert check(value) == value


def cli(tmp_path: Path, *argv: str) -> tuple[int, str]:
    err = io.StringIO()
    os.environ["TORCHDECK_STATE_DIR"] = str(tmp_path / "state")
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(list(argv))
    finally:
        os.environ.pop("TORCHDECK_STATE_DIR")
    return code, err.getvalue()


def written_outside(tmp_path: Path, since: float) -> list[Path]:
    """Files made under tmp_path (where ../../.. from the state folder lands) outside the state folder."""
    return [
        p
        for p in tmp_path.rglob("*")
        if p.is_file() and p.stat().st_mtime >= since and "state" not in p.relative_to(tmp_path).parts
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["storage", "create", "--cluster", "../../../pwned", "--region", "us-west-2", "--bucket", "td-x-1", "--yes"],
        ["image", "build", "--cluster", "../../../x", "--region", "us-west-2", "--no-push"],
        ["image", "build", "--cluster", "demo", "--region", "us-west-2", "--namespace", "x y*"],
        ["cluster", "delete", "--name", "../../../x", "--region", "us-west-2", "--yes"],
        ["cluster", "status", "--name", "../x", "--region", "us-west-2"],
        ["cluster", "connect", "--name", "../x", "--region", "us-west-2"],
    ],
    ids=["storage-cluster", "image-cluster", "image-namespace", "delete-name", "status-name", "connect-name"],
)
@pytest.mark.slow
def test_hostile_cluster_names_reach_neither_aws_nor_the_disk(tmp_path: Path, aws_env, argv: list[str]) -> None:
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    (tmp_path / "state").mkdir()
    since = (tmp_path / "state").stat().st_mtime
    code, err = cli(work, *argv)
    assert code == 2, err
    assert err.startswith("torchdeck: error: ") and err.count("\n") == 1, err
    assert "deleted" not in err
    assert written_outside(tmp_path, since) == []
    aws = AwsSession("us-west-2")
    assert aws.call("ecr", "describe_repositories")["repositories"] == []
    assert aws.call("s3", "list_buckets")["Buckets"] == []


@pytest.mark.parametrize("option,value", [("--sa-namespace", "../../etc"), ("--service-account", "x y*")])
def test_cluster_init_checks_the_service_account_names(tmp_path: Path, option: str, value: str) -> None:
    code, err = cli(
        tmp_path,
        "cluster",
        "init",
        "--name",
        "demo",
        "--region",
        "us-west-2",
        "--file",
        str(tmp_path / "c.yaml"),
        option,
        value,
    )
    assert code == 2 and value in err and err.count("\n") == 1, err
    assert not (tmp_path / "c.yaml").exists()


def test_a_cluster_record_is_never_a_path_outside_the_state_folder(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="must start with a letter"):
        ClusterRecord.open(tmp_path / "state", "../../../x", "us-west-2")
    assert ClusterRecord.file_for(tmp_path / "state", "demo") == tmp_path / "state" / "clusters" / "demo.json"


def test_the_namespace_setting_is_a_kubernetes_namespace() -> None:
    with pytest.raises(SettingsError, match="TORCHDECK_NAMESPACE: namespace must be a Kubernetes namespace"):
        Settings.load(env={"TORCHDECK_NAMESPACE": "../../etc"})
    assert Settings.load(env={"TORCHDECK_NAMESPACE": "team-a"}).namespace == "team-a"
