"""Local side of files.upload / files.download: building and safely extracting tars."""

from __future__ import annotations

import io
import os
import tarfile
from typing import Union

from .errors import InvalidArgumentError

PathLike = Union[str, "os.PathLike[str]"]


def make_tar(local: PathLike) -> bytes:
    """A tar of local: a directory's *contents* (so they land in the remote
    directory), or a single file under its base name."""
    local = os.fspath(local)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        if os.path.isdir(local):
            for name in sorted(os.listdir(local)):
                tf.add(os.path.join(local, name), arcname=name, recursive=True)
        elif os.path.exists(local):
            tf.add(local, arcname=os.path.basename(local.rstrip("/")))
        else:
            raise FileNotFoundError(local)
    return buf.getvalue()


def _check_member(m: tarfile.TarInfo, dest: str) -> None:
    name = m.name
    if name.startswith("/") or os.path.isabs(name):
        raise InvalidArgumentError(f"tar entry {name!r}: absolute path refused")
    target = os.path.realpath(os.path.join(dest, name))
    if target != dest and not target.startswith(dest + os.sep):
        raise InvalidArgumentError(f"tar entry {name!r} escapes {dest}")
    if m.issym() or m.islnk():
        link = m.linkname
        if os.path.isabs(link):
            raise InvalidArgumentError(f"tar entry {name!r}: absolute link {link!r} refused")
        base = os.path.dirname(target) if m.issym() else dest
        lt = os.path.realpath(os.path.join(base, link))
        if lt != dest and not lt.startswith(dest + os.sep):
            raise InvalidArgumentError(f"tar entry {name!r}: link {link!r} points outside {dest}")
    if m.isdev() or m.isfifo():
        raise InvalidArgumentError(f"tar entry {name!r}: device or fifo refused")


def safe_extract(data: bytes, local_dir: PathLike) -> None:
    """Extract a tar into local_dir, refusing absolute names, '..' escapes, links
    pointing outside, and device files (tarfile's "data" filter where the Python
    has it, plus the same checks done here for older ones)."""
    dest = os.path.realpath(os.fspath(local_dir))
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tf:
        members = tf.getmembers()
        for m in members:
            _check_member(m, dest)
        if hasattr(tarfile, "data_filter"):
            tf.extractall(dest, members=members, filter="data")  # type: ignore[call-arg]
        else:  # pragma: no cover - Python without PEP 706
            for m in members:
                m.mode &= 0o777
                m.uid = m.gid = os.getuid()
                m.uname = m.gname = ""
            tf.extractall(dest, members=members)
