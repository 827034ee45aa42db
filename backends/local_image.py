"""``torchdeck image build --no-push``: the training image (and ``--code`` on it) built and tagged
on this machine's container engine, touching no AWS API: no repository, no token, no login. The
tag is the build context's digest (with the build arguments'), so a build of an unchanged tree
finds its image and builds nothing. Run a job in it with ``torchdeck train --in-image NAME``.

A wheel folder here (``--torch-wheels``: torch and what the image installs beside it, as
``pip download`` fills one) is served to the build over HTTP on 127.0.0.1 while it runs (the build
then uses the host's network, and reaches nothing but that page): pip finds every package there as a
find-links page and asks no index (``PIP_NO_INDEX``), and no wheel is copied into a layer of the
image."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import html
import http.server
import io
import os
import re
import shutil
import tarfile
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import quote, unquote

from .eks.image_docker import stream_command
from .eks.image_plan import ImagePlan, code_context, context_archive, image_tag, source_root
from .eks.progress import Clock, ImageRef, Progress
from .engine import Engine, find_engine, no_engine_hint
from .errors import BackendError

WHEEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+!-]*\.whl\Z")
"""The files ``serve_wheels`` serves: wheels, by their names in the folder, and Debian's packages
(``DEB_RE``) with their index, nothing else."""
DEB_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.+~%-]*\.deb|Packages)\Z")
"""Debian's packages and their ``Packages`` index (``scripts/fetch-debs.sh``): apt's one source in an
``--mpi`` build from a folder (``docker/mpi/install.sh``)."""


def served_wheels(folder: str, names: re.Pattern[str] = WHEEL_RE) -> dict[str, Path]:
    """The wheels in ``folder`` by name (``names``: Debian's packages), regular files whose names
    are a wheel's, and, where one is a link, one that stays in the folder (nothing else of the
    machine is served)."""
    root = Path(folder).expanduser().resolve()
    found: dict[str, Path] = {}
    for path in sorted(root.iterdir()):
        real = path.resolve()
        if names.match(path.name) and real.parent == root and real.is_file():
            found[path.name] = real
    return found


@contextlib.contextmanager
def serve_wheels(folder: str | None) -> Iterator[str | None]:
    """The URL of a find-links page for the wheels in ``folder``, served read-only on
    127.0.0.1 for as long as the block runs (None, and nothing served, without a folder). Only the
    page and the wheels it names answer: no listing of the folder, no dotfiles, no links out."""
    if folder is None:
        yield None
        return
    wheels = served_wheels(folder)
    page = "".join(f'<a href="{quote(name)}">{html.escape(name)}</a>\n' for name in wheels).encode()
    files = {**served_wheels(folder, DEB_RE), **wheels}  # what pip's page lists, and apt's index

    class Wheels(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the base class's name
            self._answer(True)

        def do_HEAD(self) -> None:  # noqa: N802 - the base class's name
            self._answer(False)

        def _answer(self, body: bool) -> None:
            name = unquote(self.path.split("?", 1)[0].lstrip("/")).removeprefix("./")  # apt's flat "./NAME"
            if name in ("", "index.html"):
                self._send(200, "text/html", len(page), body and page)
            elif name in files:
                with open(files[name], "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    self._send(200, "application/octet-stream", size, None)
                    if body:
                        shutil.copyfileobj(f, self.wfile)
            else:
                self._send(404, "text/plain", 0, b"")

        def _send(self, code: int, kind: str, size: int, data: bytes | bool | None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            if isinstance(data, bytes) and data:
                self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass

    where = str(Path(folder).expanduser().resolve())
    # the same folder on the same port each time where it is free: the URL is a build argument,
    # which the engine's cache keys the torch layer by
    port = 20000 + int(hashlib.sha256(where.encode()).hexdigest()[:8], 16) % 20000
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Wheels)
    except OSError:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Wheels)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


async def _build_here(
    engine: Engine, root: Path, dockerfile: str, name: str, args: tuple[str, ...], network: str | None, clock: Clock
) -> AsyncIterator[Progress]:
    """One image built on ``engine`` from ``root``, unless the engine holds ``name`` already; the last
    event carries its id."""
    found = await asyncio.to_thread(engine.image_id, name)
    if found:
        yield Progress("build", f"{name} is built here already (nothing it is built from changed)", clock())
    else:
        argv = engine.build_argv(dockerfile, name, args, network)
        yield Progress("build", f"building {dockerfile} as {name}", clock())
        yield Progress("build", "$ " + " ".join([Path(argv[0]).name, *argv[1:]]), clock())
        async for p in stream_command(argv, None, "build", clock, root, engine.env):
            yield p
        found = await asyncio.to_thread(engine.image_id, name)
        if not found:
            raise BackendError(f"the build ended but the engine has no image {name}", "read the build output above")
    repository, _, tag = name.rpartition(":")
    yield Progress("build", f"{name} ({found})", clock(), result=ImageRef(repository, tag, ""))


async def build_local(plan: ImagePlan, engine: Engine | None = None) -> AsyncIterator[Progress]:
    """The training image (and the user's code on it, with ``plan.code``) built here; the last event
    (kind done) carries the image to run (``ImageRef``: its name, and where the code is)."""
    clock = Clock()
    engine = engine or await asyncio.to_thread(find_engine)
    if engine is None:
        raise BackendError("no container engine answers here (docker version shows no server)", no_engine_hint())
    yield Progress("build", f"builds here with {engine.words}; nothing goes to a registry", clock())
    root = source_root()
    with serve_wheels(plan.torch_wheels) as wheels:
        if wheels:  # the folder is served on 127.0.0.1: the build reaches it on the host's network
            plan = dataclasses.replace(plan, torch_find_links=wheels, network=plan.network or "host")
        archive = await asyncio.to_thread(context_archive, root)
        # from a folder, every pip install in the builds (the code's requirements too) takes its wheels
        # and asks no index
        from_folder = (f"PIP_FIND_LINKS={wheels}", "PIP_NO_INDEX=1") if wheels else ()
        # pip asks no index then: the torch index would only key the engine's cache of the torch layer
        # (one more copy of torch, several GB, in the engine and in every node it is loaded into)
        asked = tuple(a for a in plan.build_args if not (wheels and a.startswith("TORCH_INDEX_URL=")))
        args = asked + from_folder
        # the tag names what the image is built from: a served folder's passing URL is not part of it
        named = tuple(a for a in args if not (wheels and a.startswith(("TORCH_FIND_LINKS=", "PIP_FIND_LINKS="))))
        served = sorted(served_wheels(plan.torch_wheels)) if plan.torch_wheels else []  # the wheels the page lists
        if plan.torch_wheels and plan.mpi:  # and the Debian packages apt takes
            served += sorted(served_wheels(plan.torch_wheels, DEB_RE))
        extra = (f"wheels={served}",) if served else ()
        base = f"{plan.repository}:{image_tag(archive, plan.flavour, named + extra)}"
        async for p in _build_here(engine, root, plan.dockerfile, base, args, plan.network, clock):
            yield p
        code_dir = ""
        name = base
        if plan.code:
            context, dockerfile, code_dir = await asyncio.to_thread(code_context, plan)
            base_id = await asyncio.to_thread(engine.image_id, base)
            name = (
                f"{plan.repository}:code-{hashlib.sha256(context + base_id.encode()).hexdigest()[:12]}-{plan.flavour}"
            )
            with tempfile.TemporaryDirectory(prefix="torchdeck-context-") as folder:
                with tarfile.open(fileobj=io.BytesIO(context), mode="r:gz") as tar:
                    tar.extractall(folder, filter="data")
                code_args = (f"BASE={base}", *from_folder)
                async for p in _build_here(engine, Path(folder), dockerfile, name, code_args, plan.network, clock):
                    yield p
    repository, _, tag = name.rpartition(":")
    where = f" (your code at {code_dir})" if code_dir else ""
    yield Progress(
        "done",
        f"built {name} here{where}, not pushed; run a job in it: torchdeck train --in-image {name}"
        + (f" --set entrypoint.in_image={code_dir}" if code_dir else ""),
        clock(),
        "done",
        ImageRef(repository, tag, "", code_dir),
    )
