"""Small-file durability helpers shared by every module that writes metadata.

Small files (topics, offsets, locks' records) are never rewritten in place: a temp file in the
same directory is written, flushed and fsynced, the previous version is kept as ``NAME.bak``
(a hard link, so there is never a moment without a readable copy), the temp file is renamed
over the name and the directory is fsynced. Readers fall back to ``.bak`` when the main file
is missing, empty or unparsable.

Everything the store creates is private to its owner: directories 0700, files 0600.
"""
from __future__ import annotations

import errno
import json
import os
import stat
import time
import zlib
from pathlib import Path

from store.errors import CorruptionError, UsageError, io_error
from store.layout import backup_of
from store.log.format import is_segment_name

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable

DIR_MODE = 0o700
FILE_MODE = 0o600


class SegmentListing:
    """The segment bases of one directory, listed again only when the directory changed.

    Writers ask for the newest segment several times per batch (the log's end, each consume
    queue's max offset, the index's newest file); a ``listdir`` each time cost more than the
    rest of a small batch. A directory's mtime moves with every file created or removed in
    it, but by the file system's clock, which may tick only every few milliseconds: a listing
    is trusted again only when it was taken well after the mtime it saw (git's "racy clean"
    rule), so a file created in the same tick as a listing is never missed."""

    RACY_NS = 50_000_000

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._key: tuple[int, int] | None = None
        self._bases: list[int] = []

    def bases(self) -> list[int]:
        """Like :func:`segment_bases` (a new list the caller may change)."""
        try:
            st = os.stat(self.dir)
        except FileNotFoundError:
            self._key = None
            return []
        key = (st.st_ino, st.st_mtime_ns)
        if key == self._key:
            return list(self._bases)
        listed_at = time.time_ns()
        self._bases = segment_bases(self.dir)
        self._key = key if listed_at - st.st_mtime_ns > self.RACY_NS else None
        return list(self._bases)

    @property
    def stamp(self) -> tuple[int, int] | None:
        """The directory's (inode, mtime) as the last :meth:`bases` saw it, when that listing
        is trusted; else None. Two calls that leave the same stamp saw a directory in which
        no name was created, removed or replaced in between: a file opened by its name then
        is still the file of that name (readers skip a ``stat`` by path on it)."""
        return self._key


def segment_bases(directory: Path) -> list[int]:
    """Base offsets of the segment files in ``directory`` (20 ASCII digits), ascending.
    Anything else that lands there (an editor's backup, a temp file) is ignored."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if is_segment_name(n))


def ensure_dir(path: Path, durable: bool = True) -> None:
    """Create ``path`` and its missing parents, each private to the user (0700); with
    ``durable`` (the default) each new name is fsynced into its parent at once. Directories of
    derived files pass False: the derived flush syncs them (:func:`sync_dir_if_changed`).

    ``Path.mkdir(parents=True)`` would give the intermediate directories the default mode
    (0755 under the usual umask), so each missing level is created here with 0700. Existing
    directories are left as they are.
    """
    missing: list[Path] = []
    level = path
    while not level.is_dir() and level != level.parent:
        missing.append(level)
        level = level.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError as exc:
            if not directory.is_dir():  # a file is in the way
                raise io_error(exc, f"create directory {directory}") from exc
            continue  # another process created it first: fine
        except OSError as exc:
            raise io_error(exc, f"create directory {directory}") from exc
        # The new name must survive a power cut before anything in it is relied on (a
        # segment's first record, an offsets file); directories are made rarely.
        if not durable:
            continue
        try:
            fsync_dir(directory.parent)
        except OSError as exc:
            raise io_error(exc, f"sync directory {directory.parent}") from exc


def fsync_dir(path: Path | str) -> None:
    """Make a rename or a new file in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink_all(directory: Path, names: Iterable[str], warn: Callable[[str], None],
               each: Callable[[str], None] | None = None) -> None:
    """Delete the files ``names`` of ``directory`` in the order given (one already gone is
    passed over), calling ``each(name)`` after each, then fsync the directory so that the
    deletions survive a power cut. A file that cannot be deleted raises the store's I/O error
    (those before it stay deleted); a directory that cannot be synced is warned about and not
    raised: the files are gone for every process, but a power cut may bring them back."""
    try:
        for name in names:
            try:
                os.unlink(directory / name)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise io_error(exc, f"delete {directory / name}") from exc
            if each is not None:
                each(name)
    finally:
        try:
            fsync_dir(directory)
        except OSError as exc:
            warn(f"could not sync directory {directory} after deleting files from it "
                 f"({exc.strerror or exc}): a power cut may bring them back")


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, pos: int) -> None:
    """Write all of ``data`` at ``pos``: a short write is continued, and one that writes
    nothing is a full disk (ENOSPC), so the caller's error says so."""
    n = os.pwrite(fd, data, pos)
    if n == len(data):
        return   # the usual case: no view, no loop
    view = memoryview(data)
    while True:
        if n <= 0:
            raise OSError(errno.ENOSPC, "short write")
        view = view[n:]
        pos += n
        if not view:
            return
        n = os.pwrite(fd, view, pos)


def sync_dir_if_changed(path: Path | str, since_s: int) -> bool:
    """fsync directory ``path`` when its entries may have changed since ``since_s`` (its
    mtime, with two seconds' slack for coarse clocks; 0 = always). False when it is gone."""
    try:
        if since_s and os.stat(path).st_mtime < since_s - 2:
            return True
        fsync_dir(path)
    except FileNotFoundError:
        return False
    return True


def fdatasync_path(path: Path | str) -> bool:
    """``fdatasync`` a file by name; False when it no longer exists (removed meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)
    return True


def open_private(path: Path | str, flags: int) -> int:
    """``os.open`` with the store's file mode, never following a symlink at the last step."""
    return os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)


# A file replaced whole is written to a temp file beside it, renamed into place: ``.NAME.PID.tmp``
# (hidden, and named by its writer, so that two writers never share one). A writer killed
# in between leaves one behind: what ``TEMP_GLOB`` finds.
TEMP_GLOB = ".*.tmp"


def not_rewritable(path: Path) -> str | None:
    """Why a file that is to be rewritten in place (cut, appended to) cannot be: something
    other than a regular file there, or one this process cannot open for writing (read-only,
    immutable); None when it can, or when nothing is there. Opens nothing that blocks (a FIFO)."""
    try:
        st = os.stat(path)   # (a link to a file is rewritten through)
    except FileNotFoundError:
        return "a link to nothing" if os.path.islink(path) else None
    except OSError as exc:
        return exc.strerror or str(exc)
    if not stat.S_ISREG(st.st_mode):
        return "a directory, not a file" if stat.S_ISDIR(st.st_mode) else "not a regular file"
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def remove_tree(directory: Path) -> bool:
    """Remove ``directory`` and all it holds; False when it was not there. The caller syncs
    its parent (or says it could not). (shutil, with bz2's and lzma's imports, only here.)"""
    import shutil
    try:
        shutil.rmtree(directory)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise io_error(exc, f"remove {directory}") from exc
    return True


def temp_path(path: Path) -> Path:
    """The temp file this process writes ``path``'s new content to before renaming it."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def atomic_write_bytes(path: Path, data: bytes, *, keep_bak: bool = True, sync: bool = True,
                       sync_dir: bool | None = None) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content.
    ``sync_dir`` False (default: as ``sync``): the new content is fsynced but the rename
    is not, so a power cut may leave the old content (a consumer's offsets: redelivery)."""
    if sync_dir is None:
        sync_dir = sync
    tmp = temp_path(path)
    try:
        fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if keep_bak and path.exists():
            bak = backup_of(path)
            bak_tmp = temp_path(bak)
            try:
                os.link(path, bak_tmp)
                os.replace(bak_tmp, bak)
            except OSError:
                try:
                    os.unlink(bak_tmp)
                except OSError:
                    pass
        os.replace(tmp, path)
        if sync_dir:
            fsync_dir(path.parent)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise io_error(exc, f"write {path}") from exc


def atomic_write_json(path: Path, obj: Any, *, keep_bak: bool = True, sync: bool = True,
                      sync_dir: bool | None = None) -> None:
    """Write ``obj`` as pretty, sorted, standard JSON via :func:`atomic_write_bytes`."""
    data = (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()
    atomic_write_bytes(path, data, keep_bak=keep_bak, sync=sync, sync_dir=sync_dir)


# -- checksummed JSON: ``"crc"`` over the canonical content --------------------------------

CRC_FIELD = "crc"


def json_crc(obj: dict[str, Any]) -> int:
    """The CRC-32 of a JSON object's canonical form — ``json.dumps(sort_keys=True,
    separators=(",", ":"))`` of the object without its ``crc`` field (C-encoded: cheap next to
    the pretty form written): the one rule every checksummed metadata file follows."""
    body = {k: v for k, v in obj.items() if k != CRC_FIELD}
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def with_crc(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with its ``crc`` field set."""
    return {**obj, CRC_FIELD: json_crc(obj)}


def atomic_write_json_crc(path: Path, obj: dict[str, Any], **kw: Any) -> None:
    """:func:`atomic_write_json` of ``obj`` with its ``crc`` field."""
    atomic_write_json(path, with_crc(obj), **kw)


def crc_problem(obj: Any) -> str | None:
    """Why a parsed checksummed object cannot be trusted, or None when its ``crc`` checks."""
    if not isinstance(obj, dict):
        return "not a JSON object"
    crc = obj.get(CRC_FIELD)
    if not isinstance(crc, int):
        return "no crc field"
    if crc != json_crc(obj):
        return f"crc mismatch (stored {crc}, content {json_crc(obj)})"
    return None


def crc_mismatch(obj: Any) -> str | None:
    """:func:`crc_problem` for a file whose earlier versions were written without a ``crc``
    (read as they are): why its ``crc`` fails, None when it checks or there is none."""
    return crc_problem(obj) if isinstance(obj, dict) and CRC_FIELD in obj else None


def _parse_json(path: Path, validate: Callable[[Any], object] | None, crc: bool = False) -> Any:
    raw = path.read_bytes()
    if not raw.strip():
        raise ValueError("empty file")
    obj = json.loads(raw)
    why = crc_mismatch(obj) if crc else None
    if why is not None:
        raise ValueError(why)
    if validate is not None:
        validate(obj)
    return obj


def json_problem(path: Path, validate: Callable[[Any], object] | None = None, *, crc: bool = False) -> str | None:
    """Why :func:`read_json_with_bak` with ``validate`` (and ``crc``) cannot use the file ``path``
    (a file owner's answer to ``store check``), or None: it can, or the file is missing."""
    try:
        obj = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    except ValueError as exc:
        return f"not valid JSON: {exc}"
    why = crc_mismatch(obj) if crc else None
    if why is not None:
        return why
    try:
        if validate is not None:
            validate(obj)
    except (ValueError, TypeError, KeyError) as exc:
        return f"valid JSON of the wrong shape: {exc!s}"
    return None


def read_json_with_bak(
    path: Path,
    default: Any = None,
    validate: Callable[[Any], object] | None = None,
    warn: Callable[[str], None] | None = None,
    *,
    crc: bool = False,
) -> Any:
    """Read a JSON file written by :func:`atomic_write_json` (``crc``: by
    :func:`atomic_write_json_crc`, or without a ``crc`` by an earlier version).

    Missing main and ``.bak`` → ``default``. An unreadable main file (``crc``: or one whose
    ``crc`` fails) falls back to ``.bak`` (``warn`` is told). Both unreadable →
    :class:`CorruptionError` naming the main file: a caller must never silently start over
    from nothing.
    """
    bak = backup_of(path)
    main_error: Exception | None = None
    if path.exists():
        try:
            return _parse_json(path, validate, crc)
        except (ValueError, TypeError, KeyError, OSError) as exc:
            main_error = exc
    if bak.exists():
        try:
            obj = _parse_json(bak, validate, crc)
        except (ValueError, TypeError, KeyError, OSError) as exc:
            raise CorruptionError(str(path), 0, f"unreadable ({main_error or 'missing'}), "
                                  f"and so is {bak.name} ({exc})") from exc
        if warn is not None:
            why = main_error if main_error is not None else "missing"
            warn(f"{path} is unreadable ({why}); using {bak.name}")
        return obj
    if main_error is not None:
        raise CorruptionError(str(path), 0, f"unreadable ({main_error}) and no {bak.name}")
    return default


def check_dir_path(root: Path, what: str) -> None:
    """``root`` can be a directory (it is one, or the nearest existing path above it is):
    else a bad value, UsageError (exit 2) naming the path, whether the caller reads or
    writes: neither a missing directory (the caller's not-found) nor a mkdir's error later."""
    for p in (root, *root.parents):
        if p.is_dir():
            return
        if os.path.lexists(p):
            where = "it" if p == root else str(p)
            raise UsageError(f"{root} cannot be {what}: {where} is not a directory")
