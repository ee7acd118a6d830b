"""Files written safely: atomic writes (a reader sees the old file or the new one, never half
of one), with the user's umask, one sentence for a write that fails (disk full, read-only,
no permission), leftovers of a killed write cleaned up, and a lock that keeps two processes
out of the same folder."""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from gossipfl.errors import GossipflError

TEMP_SUFFIX = ".tmp"
LOCK_FILE = ".lock"
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class WriteError(GossipflError):
    """A file could not be written; ``no_space`` when the disk (or quota) is full."""

    def __init__(self, path: Path, exc: OSError):
        self.path = Path(path)
        self.no_space = exc.errno in NO_SPACE
        if self.no_space:
            text = f"no space left on device while writing {self.path}"
        else:
            text = f"cannot write {self.path} ({exc.strerror or exc})"
        super().__init__(text)

    def __reduce__(self):
        """Pickled as its path, whether the disk was full and its sentence (a worker process
        hands it back: gossipfl.results.lifecycle.draw_figures)."""
        return _write_error, (self.path, self.no_space, str(self))


def _write_error(path: Path, full: bool, text: str) -> WriteError:
    error = WriteError.__new__(WriteError)
    GossipflError.__init__(error, text)
    error.path, error.no_space = Path(path), full
    return error


def no_space(exc: BaseException) -> OSError | None:
    """The full-disk error behind ``exc`` (itself, its cause or context, or a library's
    wrapping that only says so in its message), else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in NO_SPACE:
            return exc
        if "No space left on device" in str(exc) or "Disk quota exceeded" in str(exc):
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        exc = exc.__cause__ or exc.__context__
    return None


class FolderInUse(GossipflError):
    """Another live process holds the lock of a folder."""


def atomic_write_bytes(path: str | Path, data: bytes | Callable[[BinaryIO], None]) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync, then rename over it.
    ``data`` may be a function writing to the open file (no copy of the bytes in memory).

    Raises :class:`WriteError` (nothing left behind) when the write fails.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise WriteError(path, exc) from None
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; files follow the umask
        _write_synced(path, fd, data)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise WriteError(path, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_synced(path: Path, fd: int, data: bytes | Callable[[BinaryIO], None]) -> None:
    """Write ``data`` (bytes, or a function writing to the file) to the open temporary file
    of ``path`` and fsync it (then close it)."""
    with _open_temp(fd) as handle:
        if callable(data):
            _stream(data, handle)
        else:
            handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _open_temp(fd: int) -> BinaryIO:
    return os.fdopen(fd, "wb")


class _Watched:
    """A file handed to a writer function that may swallow the OSError of a failed write
    (torch.save's C++ writer turns ENOSPC into ``RuntimeError: ... unexpected pos``): the
    error is kept, to be raised in its place."""

    def __init__(self, handle: BinaryIO):
        self.handle, self.error = handle, None

    def write(self, data) -> int:
        try:
            return self.handle.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        try:
            self.handle.flush()
        except OSError as exc:
            self.error = exc
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)


def _stream(data: Callable[[BinaryIO], None], handle: BinaryIO) -> None:
    """``data(handle)``; a failed write is its OSError, whatever the writer made of it."""
    watched = _Watched(handle)
    try:
        data(watched)  # type: ignore[arg-type]
    except OSError:
        raise
    except Exception:
        if watched.error is not None:
            raise watched.error from None
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    import torch

    # streamed to the file: a [M, P] state is not held twice more as bytes (issue 42)
    atomic_write_bytes(path, lambda handle: torch.save(obj, handle))


def user_path(value: str | Path, key: str) -> Path:
    """``value`` as a path with ``~`` and ``~user`` expanded, as a shell would (a config's
    ``output.dir: ~/runs`` made a folder named ``~``); one sentence naming ``key`` when the
    user is not known here."""
    try:
        return Path(value).expanduser()
    except RuntimeError:  # ~someone: no such user (or no home folder)
        raise GossipflError(f"{key}: '{value}' starts with the home folder of a user this "
                            f"machine does not know.") from None


def check_writable(path: str | Path, key: str) -> None:
    """Fail at once, naming ``key``, when the folder ``path`` could not be created or written:
    a file in the way, no permission, a read-only file system."""
    path = Path(path)
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise GossipflError(f"{key}: cannot write to '{path}': '{probe}' is a file, not a "
                            f"folder.")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise GossipflError(f"{key}: cannot write to '{path}': the folder '{probe}' is not "
                            f"writable (no permission or a read-only file system).")
    try:  # what access() cannot tell (root in /proc, some network file systems): try it
        os.rmdir(tempfile.mkdtemp(prefix=".gossipfl-probe-", dir=probe))
    except OSError as exc:
        raise GossipflError(f"{key}: cannot write to '{path}': no folder can be made in "
                            f"'{probe}' ({exc.strerror or exc}).") from None


def check_writable_file(path: str | Path, key: str) -> None:
    """Like :func:`check_writable` for a file to be written (e.g. a figure's path)."""
    path = Path(path)
    if path.is_dir():
        raise GossipflError(f"{key}: cannot write '{path}': it is a folder.")
    check_writable(path.parent, key)


def current_umask() -> int:
    """The process umask (read by setting it and restoring it at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_stamp(info: os.stat_result) -> tuple[int, ...]:
    """What tells a file's content apart from an earlier one at the same path without reading
    it: device, inode, size, modification and change times. A copy that keeps the
    modification time (``cp -p``, ``rsync -t``, ``tar x``) or a file renamed into place gets
    a new inode or change time, which no copy can carry over."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def remove_stale_temps(folder: str | Path) -> list[Path]:
    """Delete the temporary files an atomic write killed midway left in ``folder`` (call it
    only while holding the folder's lock); returns what was removed."""
    removed = []
    for path in Path(folder).glob(f".*{TEMP_SUFFIX}"):
        if path.is_file():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


class FolderLock:
    """An exclusive ``flock`` on ``<folder>/.lock`` holding the owner's pid.

    The kernel drops the lock when its process dies, so a lock file left by a killed process
    is taken over silently; a live holder makes :meth:`acquire` raise :class:`FolderInUse`
    naming its pid.
    """

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    @classmethod
    def acquire(cls, folder: str | Path, key: str) -> FolderLock:
        path = Path(folder) / LOCK_FILE
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as exc:
                raise WriteError(path, exc) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_pid(fd)
                os.close(fd)
                raise FolderInUse(f"{key}: '{folder}' is in use by process {holder} (lock "
                                  f"file {path}); wait until it ends.") from None
            except OSError as exc:  # no locks on this file system (ENOLCK), ...
                os.close(fd)
                raise WriteError(path, exc) from None
            if _same_file(fd, path):  # not unlinked by a holder releasing meanwhile
                break
            os.close(fd)
        lock = cls(path, fd)
        try:
            _write_pid(fd)
        except OSError as exc:  # the disk (or quota) full: no lock left behind
            lock.release()
            raise WriteError(path, exc) from None
        return lock

    def release(self) -> None:
        if self.fd < 0:
            return
        self.path.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = -1


def _write_pid(fd: int) -> None:
    """The lock file's content: this process's pid (written whole, or an OSError)."""
    os.ftruncate(fd, 0)
    data = f"{os.getpid()}\n".encode()
    if os.pwrite(fd, data, 0) != len(data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text if text.isdigit() else "(unknown pid)"


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


#: the largest text file :func:`read_text` reads (a config, a study: kilobytes)
TEXT_MAX_BYTES = 64 * 2**20


def read_text(path: Path, what: str = "config", kind: str = "YAML text") -> str:
    """The UTF-8 text of ``path``, or one sentence saying why it cannot be read (``kind``:
    what the file should hold, for a binary one)."""
    if path.is_dir():
        raise GossipflError(f"{what}: '{path}' is a directory, not a file.")
    if not path.exists():
        raise GossipflError(f"{what}: file '{path}' does not exist.")
    try:
        with path.open("rb") as file:  # a pipe too (<(...)); an endless device stops here
            data = file.read(TEXT_MAX_BYTES + 1)
    except OSError as exc:
        raise GossipflError(f"{what}: '{path}' cannot be read ({exc.strerror or exc}).") from None
    if len(data) > TEXT_MAX_BYTES:
        raise GossipflError(f"{what}: '{path}' holds more than {TEXT_MAX_BYTES // 2**20} MiB, "
                            f"more than any {kind} this reads.")
    if b"\x00" in data:
        raise GossipflError(f"{what}: '{path}' is a binary file, not {kind}.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GossipflError(f"{what}: '{path}' is not UTF-8 text (byte {exc.start} is "
                            f"0x{data[exc.start]:02x}).") from None
