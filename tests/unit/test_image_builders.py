"""Issue 32, the parts a real engine is not needed for: which builder answers (buildx, the plain
builder where its plugin is missing, none), the build's command for each, the torch source as
build arguments and their checks, and the Dockerfiles (and the one ``--code`` writes) as hadolint
reads them. The builds themselves run on a real engine: tests/image/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torchdeck.backends.eks.image_plan import ImagePlan, code_dockerfile, image_tag, validate_image
from torchdeck.backends.engine import Engine, find_engine
from torchdeck.backends.errors import SpecError

REPO = Path(__file__).resolve().parents[2]
HADOLINT = Path(sys.executable).with_name("hadolint")


def test_buildx_where_its_plugin_answers_the_plain_builder_where_not_and_none_without_an_engine(
    standin_docker, monkeypatch
):
    assert find_engine() == Engine(find_engine().binary, "buildx")  # type: ignore[union-attr]
    monkeypatch.setenv("STANDIN_DOCKER_BUILDX", "0")
    plain = find_engine()
    assert plain is not None and plain.kind == "docker" and plain.env == {"DOCKER_BUILDKIT": "0"}
    monkeypatch.setenv("STANDIN_DOCKER_ENGINE", "0")  # a client with no daemon, and no podman here
    monkeypatch.setenv("PATH", f"{Path(plain.binary).parent}")
    assert find_engine() is None


def test_each_builder_builds_the_context_with_the_arguments_and_only_buildx_pushes_in_the_build() -> None:
    args = ("TORCH_INDEX_URL=https://mirror.example.com/simple",)
    buildx = Engine("docker", "buildx").build_argv("docker/Dockerfile.cpu", "r:t", args, "host", "/c", "/m", True)
    assert buildx[:6] == ["docker", "--config", "/c", "buildx", "build", "--provenance=false"]
    assert "--push" in buildx and buildx[buildx.index("--metadata-file") + 1] == "/m" and buildx[-1] == "."
    plain = Engine("docker", "docker").build_argv("docker/Dockerfile.cpu", "r:t", args, "host", push=True)
    assert plain == ["docker", "build", "--file", "docker/Dockerfile.cpu", "--tag", "r:t", "--network", "host",
                     "--build-arg", args[0], "."]  # fmt: skip
    assert Engine("/usr/bin/podman", "podman").build_argv("D", "r:t")[:2] == ["/usr/bin/podman", "build"]


def test_the_torch_source_is_checked_and_names_the_image(tmp_path) -> None:
    def plan(**given: object) -> ImagePlan:
        return validate_image(ImagePlan("demo", "us-east-1", **given))  # type: ignore[arg-type]

    for bad in ("pypi.example.com/simple", "https://x/$(id)", "https://x/ y", "ftp://x", "https://x/`id`"):
        with pytest.raises(SpecError, match="--torch-index"):
            plan(torch_index=bad)
    with pytest.raises(SpecError, match="--torch-wheels"):
        plan(torch_wheels=str(tmp_path))  # no torch wheel in it
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    # the folder is the build's only source (no index): what the image installs beside torch is named
    with pytest.raises(SpecError, match="holds no wheel of numpy, setuptools, wheel") as lacking:
        plan(torch_wheels=str(tmp_path))
    assert f"pip download --dest {tmp_path} numpy setuptools wheel" in lacking.value.hint
    for name in ("numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl", "setuptools-84.2.1-py3-none-any.whl",
                 "wheel-0.48.0-py3-none-any.whl"):  # fmt: skip
        (tmp_path / name).write_bytes(b"")
    assert plan(torch_wheels=str(tmp_path)).torch_wheels == str(tmp_path)
    with pytest.raises(SpecError, match="nvidia-ml-py"):
        plan(torch_wheels=str(tmp_path), variant="gpu")  # the GPU image installs NVML's bindings too
    with pytest.raises(SpecError, match="--torch-wheels"):
        plan(torch_wheels=str(tmp_path), builder="kaniko")  # a folder here cannot reach the cluster
    with pytest.raises(SpecError, match="--network"):
        plan(network="host; rm -rf /")
    given = plan(torch_index="https://mirror.example.com/simple", torch_find_links="https://files.example.com/w/")
    assert given.build_args == (
        "TORCH_INDEX_URL=https://mirror.example.com/simple",
        "TORCH_FIND_LINKS=https://files.example.com/w/",
    )
    assert plan().build_args == ()
    # --mpi: one more argument and its own tag; from a folder, Debian's packages must be in it too
    with pytest.raises(SpecError, match="no Debian packages for --mpi") as no_debs:
        plan(torch_wheels=str(tmp_path), mpi=True)
    assert f"scripts/fetch-debs.sh {tmp_path} openmpi-bin openssh-server openssh-client" in no_debs.value.hint
    (tmp_path / "openmpi-bin_4.1.4-3+b1_amd64.deb").write_bytes(b"")
    (tmp_path / "Packages").write_text("Package: openmpi-bin\n")
    mpi = plan(torch_wheels=str(tmp_path), mpi=True)
    assert mpi.build_args == ("MPI=1",) and mpi.flavour == "cpu-mpi" and plan(variant="gpu").flavour == "gpu"
    assert image_tag(b"ctx", "cpu") == image_tag(b"ctx", "cpu", ())  # no arguments: the tag as before
    assert image_tag(b"ctx", "cpu", given.build_args) != image_tag(b"ctx", "cpu")


@pytest.mark.parametrize("requirements", [None, "requirements.txt"])
def test_the_dockerfiles_lint_clean_with_hadolint(tmp_path, requirements) -> None:
    written = tmp_path / "Dockerfile.torchdeck"
    written.write_text(code_dockerfile(requirements))
    files = [REPO / "docker" / "Dockerfile.cpu", REPO / "docker" / "Dockerfile.gpu", written]
    done = subprocess.run([str(HADOLINT), *map(str, files)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
