"""The user's own code on the local backend, checked before anything starts: which interpreter
runs it (the spec's, the active environment's, else python3), that it has torch and that the
script or module is there; and the folder that lends ``torchdeck.report`` to a script whose
environment lacks torchdeck."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .bundle import unresolved_imports
from .errors import BackendError, SpecError
from .spec import JobSpec


def user_python(spec: JobSpec, own: str) -> str:
    """The interpreter that runs the user's code: the spec's, else the active virtual (or conda)
    environment's, else the first python3 on PATH, else torchdeck's own."""
    named = spec.entrypoint.python
    if named:
        return str(Path(named).expanduser()) if "/" in named else (shutil.which(named) or named)
    for env in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        prefix = os.environ.get(env)
        if prefix and (Path(prefix) / "bin" / "python").exists():
            return str(Path(prefix) / "bin" / "python")
    return shutil.which("python3") or shutil.which("python") or own


PROBE = """
import importlib.util, sys
if importlib.util.find_spec("torch") is None:  # found, not imported: importing takes seconds
    print("ModuleNotFoundError: No module named 'torch'"); sys.exit(3)
module = sys.argv[1]
if module:
    try:
        found = importlib.util.find_spec(module)
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}"); sys.exit(4)
    if found is None:
        print(f"no module named {module!r}"); sys.exit(4)
def absent(name):
    try:
        return importlib.util.find_spec(name) is None
    except Exception:  # it is there, and odd: the script will say what it makes of it
        return False
missing = [name for name in sys.argv[2:] if absent(name)]
if missing:
    print(", ".join(missing)); sys.exit(5)
"""


def report_helper_path(run_dir: Path) -> Path:
    """Where ``report_helper`` puts its folder in a run's folder."""
    return run_dir / "pylib"


def report_helper(run_dir: Path) -> Path:
    """A folder holding ``torchdeck.report`` alone (the standard-library reporting helper), so a
    script in an environment without torchdeck can import it, and nothing else of torchdeck's."""
    import torchdeck

    folder = report_helper_path(run_dir)
    (folder / "torchdeck").mkdir(parents=True, exist_ok=True)
    (folder / "torchdeck" / "__init__.py").write_text(f'__version__ = "{torchdeck.__version__}"\n')
    shutil.copyfile(Path(torchdeck.__file__).with_name("report.py"), folder / "torchdeck" / "report.py")
    return folder


def check_user_code(spec: JobSpec) -> None:
    """One clear line before anything starts: a code folder or script that is not there, an
    interpreter that does not run or lacks torch, a module that does not import."""
    e = spec.entrypoint
    python = str(e.python)
    code = Path(e.code)
    prefix, cwd = [python], code / (e.workdir or "")
    if spec.local_image:  # the image's python, where the ranks will run, sees what they will see
        from .local_in_image import code_paths, engine_for_runs

        _, workdir, mounts = code_paths(spec)
        engine = engine_for_runs()
        prefix = [engine.binary, "run", "--rm", "--network", "none", "--workdir", workdir, *mounts]
        prefix += ["--entrypoint", "python", "--", spec.local_image]
        python, cwd = f"the image {spec.local_image}", Path.cwd()
        if e.in_image:  # the code is the image's: nothing here to look at
            return _probe(spec, [*prefix, "-c", PROBE, e.module or ""], python, cwd)
    if not code.is_dir():
        raise SpecError("entrypoint.code", f"no code folder at {code}", "entrypoint.code is relative to the spec file")
    if e.script and not (code / e.script).is_file():
        raise SpecError(
            "entrypoint.script", f"no script {e.script} in {code}", "check the path (relative to the code folder)"
        )
    if e.workdir and not (code / e.workdir).is_dir():
        raise SpecError("entrypoint.workdir", f"no folder {e.workdir} in {code}", "a folder inside the code folder")
    # the script's imports that neither the code folder nor the standard library holds: the
    # interpreter must have them (a missing one is one line now, not a traceback in every rank)
    imports = unresolved_imports(code, e.script, e.requirements) if e.script else []
    _probe(spec, [*prefix, "-c", PROBE, e.module or "", *imports], python, cwd)


def _probe(spec: JobSpec, argv: list[str], python: str, cwd: Path) -> None:
    """Run the probe; one line for what it found missing."""
    e = spec.entrypoint
    code = Path(e.code)
    try:
        probe = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError(
            f"cannot run {python}: {getattr(exc, 'strerror', None) or exc}",
            "set entrypoint.python to the interpreter of the environment your code needs",
        ) from None
    said = (probe.stdout.strip().splitlines() or [probe.stderr.strip()[-200:]])[-1:] or [""]
    if probe.returncode == 3:
        raise BackendError(
            f"torch does not import in {python} (the interpreter that runs your code): {said[0]}",
            "activate the environment that has torch, or set entrypoint.python (--python) to its interpreter",
        )
    if probe.returncode == 4:
        raise SpecError(
            "entrypoint.module",
            f"{e.module} does not import with {python} from {code}: {said[0]}",
            "run from the folder that holds the package, or set entrypoint.code to it",
        )
    if probe.returncode == 5:
        raise SpecError(
            "entrypoint.script",
            f"{e.script} imports {said[0]}, which {python} cannot import and the code folder does not hold",
            "install it in that environment (or add it to the code folder); clusters: add it to requirements.txt",
        )
    if probe.returncode != 0:
        raise BackendError(f"{python} failed a check: {said[0]}", "set entrypoint.python to a working interpreter")
