"""Where the explain pages (``hlgt.explain``) are written: only over what was written here.

Every page carries a marker in its head (``MARKER``). A page file is new, or a file that carries
the marker; a folder of pages (``PageFolder``) is new, or holds only HTML files that carry it, and
a new set of pages replaces them. Both are checked before any work, so that a path that cannot
take the pages is one line at once, not an error after the decoding. A page is written whole
(``hlgt.storage.write_text``: a unique temporary file renamed over it), and one command at a time
writes a folder.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from hlgt.storage import sole_writer, write_text

GENERATOR = "hlgt.explain"
MARKER = f'<meta name="generator" content="{GENERATOR}">'


def is_page(path: Path) -> bool:
    """A file this module wrote (its marker in the first kilobytes)."""
    try:
        with path.open("rb") as f:
            return MARKER.encode() in f.read(4096)
    except OSError:
        return False


def _writable_folder(folder: Path, what: str) -> None:
    """``OSError`` unless ``folder``, or the nearest folder above it that exists, is writable."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise NotADirectoryError(f"{what}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"{what}: the folder {existing} is not writable")


def check_page_file(path: str | os.PathLike, option: str = "--explain") -> Path:
    """``path`` can take a page: a new file in a writable folder, or a page this module wrote.
    Otherwise ``OSError``, one line naming the option: checked before any work."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{option} {path} is a folder: give the page's file name")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{option} {path}: there is no folder {path.parent}")
    _writable_folder(path.parent, f"{option} {path}")
    if path.exists() and not is_page(path):
        raise FileExistsError(f"{option} {path} exists and is not a page this command wrote: it is not replaced")
    return path


def check_page_folder(path: str | os.PathLike, option: str = "--explain-dir") -> Path:
    """``path`` can take a folder of pages: new (made with the folders above it), or a folder
    whose HTML files are all pages this module wrote. Otherwise ``OSError``, one line."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{option} {path} is a file, not a folder")
    _writable_folder(path, f"{option} {path}")
    foreign = [f.name for f in sorted(path.glob("*.html")) if not is_page(f)] if path.is_dir() else []
    if foreign:
        raise FileExistsError(f"{option} {path} holds HTML files this command did not write ({', '.join(foreign[:3])}"
                              f"{', ...' if len(foreign) > 3 else ''}): choose another folder")
    return path


class PageFolder:
    """A folder of pages and its ``index.html``, written by one command at a time (a second is
    refused while the first writes). Checked when made (``check_page_folder``); on entering, the
    pages a previous command left there are removed, so that the folder holds one set."""

    def __init__(self, path: str | os.PathLike, option: str = "--explain-dir"):
        self.path = check_page_folder(path, option)
        self.option = option
        self.pages: list[str] = []
        self._lock = None

    def __enter__(self) -> PageFolder:
        self._lock = sole_writer(str(self.path), f"{self.option} {self.path}: another command is writing pages there")
        self._lock.__enter__()
        try:
            check_page_folder(self.path, self.option)  # again, now that no other command writes it
            self.path.mkdir(parents=True, exist_ok=True)
            for old in self.path.glob("*.html"):
                old.unlink()
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._lock.__exit__(*exc)

    def add(self, problem_id: str, text: str) -> str:
        """Write one problem's page; its file name, unique in the folder."""
        name = f"{len(self.pages) + 1:04d}-{re.sub(r'[^A-Za-z0-9._-]+', '_', str(problem_id))[:48]}.html"
        write_text(self.path / name, text)
        self.pages.append(name)
        return name

    def index(self, text: str) -> Path:
        return write_text(self.path / "index.html", text)
