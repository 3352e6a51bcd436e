"""Where the project keeps its files, how it writes them and what it may delete.

Runs, sweeps and shards live under the shared storage root ``$HLGT_STORAGE`` (an S3 URI or an
NFS path on a cluster), else under the working directory (``storage_path``, ``storage_root``);
folders may be local paths or URIs that pyarrow's filesystems take (``s3://...``), as Ray's
storage is (``filesystem``); a folder written locally is copied to such a URI with ``copy_folder``.

Two commands writing one local folder at once (a shard folder's splits, a run's checkpoints, a
sweep's trials) would mix their files: a lock file beside the folder keeps them apart
(``exclusive``: a shard build waits; ``sole_writer``: a run or a sweep is refused). A command that
reads a folder for long (a training its shards) holds a second lock file beside it shared
(``reading``), and a command that would replace those files is refused meanwhile
(``not_being_read``).

A file a command writes for the user (answers, predictions, tables, a manifest) is replaced whole
or not at all: it is written under a unique temporary name in its own folder and renamed over the
target (``replacing``), so that two commands writing one file never mix their lines, a kill leaves
the earlier file, and a failed write leaves no stray file behind. An ``OSError`` from the write
(a full disk) names the target.

A command deletes only a folder the project made: a run folder (``hlgt.train``), a sweep folder
(``tune/sweep.py``), a shard folder (``hlgt.data.build``) or a learning-curve folder
(``hlgt.train.curve``) holds a marker file (``MARKER``, naming its kind) written when the command
created the folder, and is checked for it before anything in it is removed or replaced
(``claim``). A folder without one (made by hand, or by a version of the project before the marker)
is never deleted: the command says how to remove it by hand, and trains or writes into it only
when it is an earlier version's folder of the same kind. Names typed on
a command line (``--name``) are single folder names, never paths (``check_name``).
"""
from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Callable, Iterator

# pyarrow.fs is imported by the functions that open a filesystem: every command imports this module,
# and most of them (solve, report, explain) open none.


def shared_storage() -> str:
    """The shared storage root ``$HLGT_STORAGE`` (an S3 URI or an NFS path on a cluster), without a
    trailing slash; ``""`` when unset. The one place the variable is read."""
    return os.environ.get("HLGT_STORAGE", "").rstrip("/")


def is_uri(path: str | os.PathLike) -> bool:
    """A remote location (``s3://bucket/...``) rather than a path on this machine's filesystem."""
    return "://" in str(path)


def storage_path(*parts: str) -> str:
    """A path under the shared storage root, else under the working directory: shards,
    checkpoints and Tune results all live there."""
    root = shared_storage()
    return "/".join([root, *parts]) if root else os.path.join(*parts)


def storage_root(explicit: str | None, local_default: str, under: str) -> str:
    """Where a command keeps its runs: ``explicit``, else ``<shared storage>/<under>``, else
    ``local_default``; a local path is made absolute (Ray's workers run elsewhere)."""
    root = explicit or (storage_path(under) if shared_storage() else local_default)
    return root if is_uri(root) else str(Path(root).resolve())


def filesystem(root: str):
    """The pyarrow filesystem of ``root`` (a local path or a URI Ray's storage takes) and the path
    of ``root`` in it."""
    import pyarrow.fs

    return pyarrow.fs.FileSystem.from_uri(root if is_uri(root) else str(Path(root).resolve()))


MARKER = ".hlgt-folder"
KINDS = ("run", "sweep", "shards", "curve")
# The flags that choose another folder of each kind.
ELSEWHERE = {"run": "--name (or --storage)", "sweep": "--name (or --storage)",
             "shards": "--out (a training's or sweep's: --set data.shards_dir=DIR)", "curve": "--out"}


def copy_folder(local: Path, uri: str) -> int:
    """Copy every file under the local folder ``local`` to the same relative path under ``uri``
    (a URI pyarrow's filesystems take), replacing what is there; hidden files (markers, locks,
    partial writes) stay behind. -> how many files were copied."""
    import pyarrow.fs

    fs, root = filesystem(uri)
    return copy_tree(pyarrow.fs.LocalFileSystem(), str(Path(local).resolve()), fs, root)


def copy_tree(source_fs, source: str, target_fs, target: str) -> int:
    """``copy_folder`` between any two pyarrow filesystems: the files under ``source`` in
    ``source_fs`` to the same relative paths under ``target`` in ``target_fs``, hidden ones left."""
    import pyarrow.fs

    source = source.rstrip("/")
    copied = 0
    for f in sorted(source_fs.get_file_info(pyarrow.fs.FileSelector(source, recursive=True)), key=lambda f: f.path):
        relative = f.path[len(source) + 1:]
        if f.type != pyarrow.fs.FileType.File or any(part.startswith(".") for part in relative.split("/")):
            continue
        destination = f"{target}/{relative}"
        target_fs.create_dir(destination.rsplit("/", 1)[0], recursive=True)
        pyarrow.fs.copy_files(f.path, destination, source_filesystem=source_fs, destination_filesystem=target_fs)
        copied += 1
    return copied


def check_name(name: str, flag: str = "--name") -> str:
    """``name`` when it is one folder name; ``ValueError`` naming ``flag`` for ``.``, ``..``, an
    empty name, an absolute one or one with a path separator (it would reach outside the storage)."""
    seps = {"/", "\\", os.sep, os.altsep or "/"}
    if name in ("", ".", "..") or os.path.isabs(name) or any(s in name for s in seps) or "\0" in name:
        raise ValueError(f"{flag} {name!r} is not a folder name: give one name without '/' (not '.' or '..'), "
                         "and --storage for where it goes")
    return name


def _info(root: str):
    import pyarrow.fs

    fs, path = filesystem(root)
    return fs, path, fs.get_file_info(path).type, pyarrow.fs


def _entries(fs, path: str) -> list[str]:
    import pyarrow.fs

    return [f.base_name for f in fs.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True))]


def folder_kind(root: str) -> str | None:
    """The kind a project folder's marker names, or None when ``root`` has no marker."""
    fs, path, _, _ = _info(root)
    try:
        with fs.open_input_stream(f"{path}/{MARKER}") as f:
            kind = json.loads(f.read()).get("kind")
    except (FileNotFoundError, ValueError, AttributeError):
        return None
    return kind if kind in KINDS else None


def claim(root: str, kind: str, earlier: tuple[str, ...] = ()) -> None:
    """Make ``root`` this command's folder of ``kind``: created with its marker when it is missing
    or empty; a folder of another kind is refused, and so is a non-empty folder without a marker
    unless it holds what a pattern of ``earlier`` names (what an earlier version's folder of
    ``kind`` holds; "a/b": an entry matching "a" holding the file "b"): that folder is resumed as
    it is, and never deleted."""
    assert kind in KINDS, kind
    fs, path, found, pafs = _info(root)
    if found == pafs.FileType.File:
        raise NotADirectoryError(f"{root} is a file, not a folder")
    entries = _entries(fs, path) if found == pafs.FileType.Directory else []
    if entries:
        other = folder_kind(root)
        if other not in (None, kind):
            raise ValueError(f"{root} is a {other} folder, not a {kind} folder: give another {ELSEWHERE[kind]}")
        if other is None and not _holds_earlier(fs, path, entries, earlier, pafs.FileType.File):
            raise ValueError(f"{root} holds files and no {MARKER}: it is not a {kind} folder the project made, "
                             f"and nothing in it is replaced: give another {ELSEWHERE[kind]}")
        return
    fs.create_dir(path, recursive=True)
    with fs.open_output_stream(f"{path}/{MARKER}") as f:
        f.write(json.dumps({"kind": kind, "made_by": "hlgt"}).encode("utf-8") + b"\n")


def _holds_earlier(fs, path: str, entries: list[str], earlier: tuple[str, ...], file_type) -> bool:
    for pattern in earlier:
        head, _, inner = pattern.partition("/")
        for entry in (e for e in entries if fnmatch.fnmatch(e, head)):
            if not inner or fs.get_file_info(f"{path}/{entry}/{inner}").type == file_type:
                return True
    return False


def check_owned(root: str, kind: str, flag: str) -> None:
    """``ValueError`` unless ``root`` is missing, empty, or a folder of ``kind`` that the project made."""
    fs, path, found, pafs = _info(root)
    if found == pafs.FileType.NotFound or found == pafs.FileType.Directory and not _entries(fs, path):
        return
    if found != pafs.FileType.Directory:
        raise NotADirectoryError(f"{root} is a file, not a {kind} folder: {flag} removes only what the project made")
    have = folder_kind(root)
    if have == kind:
        return
    made = f"is a {have} folder" if have else f"has no {MARKER} file (made by hand, or by an earlier version)"
    raise ValueError(f"{flag} removes only a {kind} folder the project made, and {root} {made}: if it should go, "
                     f"remove it by hand (rm -r {root}), then run again")


def remove_owned(root: str, kind: str, flag: str) -> bool:
    """Delete ``root`` when it is a folder of ``kind`` that the project made (``check_owned``);
    False when there was nothing to delete."""
    check_owned(root, kind, flag)
    fs, path, found, pafs = _info(root)
    if found == pafs.FileType.NotFound:
        return False
    fs.delete_dir(path)
    return True


@contextlib.contextmanager
def _flock(path: Path, mode: int, busy: Callable[[], None], open_mode: str = "a+") -> Iterator[None]:
    """Hold the lock file ``path`` in ``mode`` (shared or exclusive); when another command holds
    it the other way, ``busy()`` runs first (it may raise instead of waiting). A storage that takes
    no file locks (NFS without its lock daemon, Lustre mounted without flock) is an ``OSError``
    naming the lock file: nothing would keep two commands apart there."""
    with open(path, open_mode) as lock:
        if not _locked(lock, mode | fcntl.LOCK_NB, path):
            busy()
            _locked(lock, mode, path)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _locked(lock, mode: int, path: Path) -> bool:
    """``flock(lock, mode)``: False when another command holds it (``LOCK_NB``)."""
    try:
        fcntl.flock(lock, mode)
    except BlockingIOError:
        return False
    except OSError as error:
        raise NoLocks(f"cannot lock {path} ({error.strerror or error}): this storage takes no file locks, "
                      "so commands sharing its folders cannot be kept apart; use a local disk or a mount "
                      "with locks (NFS with lockd, Lustre with -o flock)") from error
    return True


class NoLocks(OSError):
    """The storage of a lock file takes no file locks."""


@contextlib.contextmanager
def exclusive(out: Path, busy: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the lock of folder ``out`` (a lock file beside it): two commands writing the same
    folder at once (a shard folder's partial splits, a run's checkpoints) would mix their files.
    When another command holds it, ``busy()`` runs first (it may raise instead of waiting); by
    default a shard build says it waits."""
    out.parent.mkdir(parents=True, exist_ok=True)

    def say_wait() -> None:
        print(f"[build] waiting for another command building {out}", flush=True)

    with _flock(_lock_file(out, "lock"), fcntl.LOCK_EX, busy or say_wait):
        yield


def _lock_file(folder: Path, kind: str) -> Path:
    """``.<name>.<kind>`` beside ``folder``, the folder named as resolved: every spelling of it
    (relative, through a symlink, ``.``) locks the same file."""
    folder = folder.resolve()
    return folder.parent / f".{folder.name}.{kind}"


@contextlib.contextmanager
def reading(folder: str | Path) -> Iterator[None]:
    """A shared hold on ``folder`` while a command reads its files, which a training does for
    hours (its shards each epoch, its test rows at the end): ``not_being_read`` is refused
    meanwhile, so nothing replaces the files under it. While another command replaces them, this
    one waits, saying so. A lock file another user made is held through a read-only handle. Where
    none can be made or opened beside the folder (read-only storage), no command can replace the
    files either: nothing is held; nor for a URI (s3://...), whose users keep its names apart; nor,
    said, where the storage takes no file locks."""
    lock = None if is_uri(folder) else _lock_file(Path(folder), "readers")
    open_mode = lock and _open_mode(lock)
    if not open_mode:
        yield
        return

    def say_wait() -> None:
        print(f"[shards] waiting for another command replacing {folder}", flush=True)

    with contextlib.ExitStack() as held:
        try:
            held.enter_context(_flock(lock, fcntl.LOCK_SH, say_wait, open_mode))
        except NoLocks as error:  # a reader goes on: only writers need the lock to stay apart
            print(f"[shards] reading {folder} without a hold: {error}", flush=True)
        yield


def _open_mode(lock: Path) -> str | None:
    """How a reader opens ``lock``: to create it ("a+"), read-only where another user made it
    ("r"), or None where neither works."""
    for mode in ("a+", "r"):
        try:
            open(lock, mode).close()
            return mode
        except OSError:
            continue
    return None


@contextlib.contextmanager
def not_being_read(folder: Path, busy_message: str) -> Iterator[None]:
    """The sole hold on ``folder`` while a command deletes or replaces files that readers
    (``reading``) may be using; ``OSError(busy_message)`` while any command reads it."""

    def refuse() -> None:
        raise OSError(busy_message)

    with _flock(_lock_file(folder, "readers"), fcntl.LOCK_EX, refuse):
        yield


def sole_writer(folder: str, busy_message: str) -> contextlib.AbstractContextManager:
    """The lock of ``folder`` while one command writes it (a run's or a sweep's): a second command
    is refused with ``OSError(busy_message)`` instead of mixing its files in. A folder given as a
    URI (s3://...) has no local lock: the cluster's users keep its names apart."""

    def refuse() -> None:
        raise OSError(busy_message)

    return contextlib.nullcontext() if is_uri(folder) else exclusive(Path(folder), busy=refuse)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def replacing(path: str | Path, binary: bool = False) -> Iterator[IO]:
    """A file to write that replaces ``path`` whole when the block ends: a unique temporary file in
    ``path``'s folder, renamed over it; removed when the block fails. An ``OSError`` without a file
    name (a full disk) is raised again naming ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # as open() makes a file, not mkstemp's 0600
            yield f
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None and e.errno is not None:
            raise OSError(e.errno, f"{e.strerror} (writing {path})") from e
        raise


def write_text(path: str | Path, text: str) -> str | Path:
    """``text`` as the whole of ``path`` (UTF-8), through ``replacing``; at a URI (s3://...) an
    object store replaces an object whole by itself."""
    if is_uri(path):
        fs, where = filesystem(str(path))
        with fs.open_output_stream(where) as f:
            f.write(text.encode("utf-8"))
        return str(path)
    with replacing(path) as f:
        f.write(text)
    return Path(path)
