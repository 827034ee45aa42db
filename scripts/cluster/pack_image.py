"""Write a small image as a `docker save` archive to stdout, for the node's containerd to import
(`ctr images import`) with no registry:

    pack_image.py NAME ENTRYPOINT FILE=PATH... LINK->TARGET...

FILE=PATH puts the file FILE here at PATH in the image; LINK->TARGET makes a symbolic link. The pause
image is the static pause program alone; the operator's init-container image is Debian's static
busybox with the links its command uses (sh, nslookup, seq, sleep, echo)."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile


def layer(entries: list[str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folders: set[str] = set()
        for entry in entries:
            link, arrow, target = entry.partition("->")
            source, _, path = entry.partition("=")
            path = (link if arrow else path).lstrip("/")
            for depth in range(1, path.count("/") + 1):
                folder = "/".join(path.split("/")[:depth])
                if folder not in folders:
                    folders.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            if arrow:
                info = tarfile.TarInfo(path)
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
                tar.addfile(info)
                continue
            info = tar.gettarinfo(source, arcname=path)
            info.uid = info.gid = info.mtime = 0
            info.uname = info.gname = ""
            info.mode = 0o755
            with open(source, "rb") as data:
                tar.addfile(info, data)
    return out.getvalue()


def main(name: str, entrypoint: str, *entries: str) -> None:
    diff = layer(list(entries))
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": [entrypoint]},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(diff).hexdigest()]},
        }
    ).encode()
    manifest = json.dumps([{"Config": "config.json", "RepoTags": [name], "Layers": ["layer.tar"]}]).encode()
    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as tar:
        for arcname, data in (("layer.tar", diff), ("config.json", config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
