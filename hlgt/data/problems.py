"""Any supported problem file → typed ``Problem`` records.

Three layouts are read, detected from the file itself:

* Math23K's 7-line format: pretty-printed JSON objects written one after another (not one JSON
  document, not one object per line);
* one JSON array of objects (MAWPS);
* JSON Lines, one object per line (APE210K and the project's own sample files).

A record needs ``id``, a text and at least one of ``equation`` and ``ans``. The benchmark files
give ``segmented_text`` (tokens split by spaces, in the forms a raw text is read in) and both ``equation`` and
``ans``. The generic format, for files of other sources (SVAMP, ASDiv-A, your own): a JSON list
or JSON Lines of objects with ``id``, ``original_text`` (raw text, tokenised as ``solve`` does it,
``hlgt.data.text``) and ``equation`` (``x=...``) and/or ``ans``; without ``ans`` the answer is the
equation's value, without ``equation`` the problem is scored by its answer only.
Values are taken with the standard ``json`` module, never pandas/Arrow, so ids stay strings
(MAWPS writes them as ints) and answers stay exactly as written (MAWPS writes floats).

A null ``equation`` or ``ans`` is an absent one. A repeated id is made unique (the second ``a``
reads as ``a#2``), with a note.

A record that cannot be used is skipped and counted under a named reason in
``ReadResult.skipped`` (JSON that does not parse, nests too deep for Python's reader or holds an
integer of more than 4,300 digits; a missing or mistyped field; an empty text) — never dropped
silently, never a crash — and the first few are noted, each naming its file and line. JSON Lines
are read a line at a time, split on ``\n`` only (a raw U+2028 inside a string is no line break).
A file that cannot be opened, or a JSON array that does not parse as a whole, raises
``DataFileError`` naming the file.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from hlgt.data.text import segmented_tokens, tokenize

# Reader skip reasons (the report prints them under these names).
MALFORMED_JSON = "malformed_json"  # not JSON (or not UTF-8 text)
NESTED_TOO_DEEP = "nested_too_deep"  # JSON nested deeper than Python's reader goes
NUMBER_TOO_LONG = "number_too_long"  # an integer of more digits than Python converts (4,300)
NOT_AN_OBJECT = "not_an_object"
MISSING_FIELD = "missing_field"
BAD_FIELD_TYPE = "bad_field_type"
EMPTY_TEXT = "empty_text"
MAX_NOTES = 20  # messages about single records kept per file

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_SPACE = re.compile(r"\s*")
# Where reading resumes after a malformed object: the next object opening a line, or following a '}'.
_NEXT_OBJECT = re.compile(r"(?:^[ \t]*|(?<=\})[ \t]*)\{", re.M)
# A byte that is not UTF-8, as "surrogateescape" decodes it.
_NOT_UTF8 = re.compile("[\udc80-\udcff]")
_BOM = b"\xef\xbb\xbf"


class DataFileError(ValueError):
    """A whole file cannot be read (missing, unreadable, or not JSON at all)."""


@dataclass(frozen=True)
class Problem:
    id: str  # always a string
    lang: str  # "zh" | "en"
    tokens: tuple[str, ...]  # segmented text, as in the file (split on whitespace)
    equation: str  # raw, e.g. "x=(11-1)*2"
    answer: str  # raw answer as a string
    source: str  # e.g. "math23k/Math_23K_train.json"
    line: int = field(default=0, compare=False)  # where the record starts in its file


@dataclass
class ReadResult:
    problems: list[Problem]
    skipped: collections.Counter = field(default_factory=collections.Counter)  # reason -> count
    records: int = 0  # records seen in the file (problems + skipped)
    notes: list[str] = field(default_factory=list)  # the first MAX_NOTES messages about records, "FILE:LINE: ..."
    skipped_ids: list[str] = field(default_factory=list)  # the ids of skipped records that have one

    def skip(self, reason: str, where: str, detail: str) -> None:
        self.skipped[reason] += 1
        self.note(f"{where}: {reason} ({detail})")

    def note(self, message: str) -> None:
        if len(self.notes) < MAX_NOTES:
            self.notes.append(message)


class UniqueIds:
    """Ids as the records give them, a repeat made unique: the second ``a`` is ``a#2`` (a
    predictions file is read by id, and ``compare`` refuses a file with an id twice)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.next: dict[str, int] = {}

    def take(self, pid: str) -> str:
        unique, k = pid, self.next.get(pid, 2)
        while unique in self.seen:
            unique, k = f"{pid}#{k}", k + 1
        self.next[pid] = k
        self.seen.add(unique)
        return unique


def guess_lang(text: str) -> str:
    """``"zh"`` when the text holds a CJK character, else ``"en"``."""
    return "zh" if _CJK.search(text) else "en"


def source_name(path: str | Path) -> str:
    """``.../math23k/Math_23K_train.json`` → ``"math23k/Math_23K_train.json"``."""
    p = Path(path)
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def read_problems(path: str | Path, lang: str | None = None) -> ReadResult:
    """Read one file in any of the three layouts; ``lang`` None guesses it from the file's texts."""
    result = ReadResult(problems=[])
    result.problems = list(iter_problems(path, result, lang))
    if not result.problems:
        skipped = f" (skipped: {dict(result.skipped)})" if result.skipped else ""
        raise DataFileError(f"{path} holds no readable problem{skipped}")
    if lang is not None:
        _check_language(Path(path), result.problems, lang)
    return result


def iter_problems(path: str | Path, result: ReadResult, lang: str | None = None) -> Iterator[Problem]:
    """The file's problems one by one, every record counted into ``result`` as it is read (its
    ``problems`` stay empty): a JSON Lines file is read a line at a time, so a large one is never
    held whole. A repeated id is made unique, with a note."""
    path = Path(path)
    if lang not in (None, "zh", "en"):
        raise ValueError(f"lang must be 'zh', 'en' or None, got {lang!r}")
    records = _records(path)
    # One language per file, its texts' majority guess: a Math23K problem that is pure arithmetic
    # ("840/6/70+630=．") is still Chinese data, and a raw one is tokenised as Chinese.
    file_lang = lang or _majority_lang(records)
    source, ids = source_name(path), UniqueIds()
    for line, value in records:
        where = f"{path}:{line}"
        result.records += 1
        if isinstance(value, Unreadable):
            result.skip(value.reason, where, value.detail)
            if value.id is not None:
                result.skipped_ids.append(value.id)
            continue
        record = _fields(value, result, where)
        problem = record and _to_problem(record, file_lang, source, result, where, line)
        if not problem and (skipped_id := _id_of(value)) is not None:
            result.skipped_ids.append(skipped_id)
        if problem:
            unique = ids.take(problem.id)
            if unique != problem.id:
                result.note(f"{where}: id {problem.id!r} repeats an earlier record's: read as {unique!r}")
                problem = dataclasses.replace(problem, id=unique)
            yield problem


def _id_of(record: Any) -> str | None:
    """A record's id as read (a string or an integer), else None."""
    pid = record.get("id") if isinstance(record, dict) else None
    return str(pid) if isinstance(pid, (str, int)) and not isinstance(pid, bool) else None


def _majority_lang(records: Iterable[tuple[int, Any]]) -> str:
    guesses = collections.Counter()
    for _, value in records:
        record = None if isinstance(value, Unreadable) else _fields(value, ReadResult(problems=[]), "")
        if record is not None and record.text.strip():
            guesses[guess_lang(record.text)] += 1
    return "zh" if guesses["zh"] >= guesses["en"] else "en"


def _check_language(path: Path, problems: list[Problem], lang: str) -> None:
    """A file read as ``lang`` whose texts are mostly in the other language is the wrong file
    (MAWPS saved under a Math23K name would otherwise train as 2,373 "Chinese" problems)."""
    matching = sum(guess_lang(" ".join(p.tokens)) == lang for p in problems)
    if 2 * matching < len(problems):
        names = {"zh": "Chinese", "en": "English"}
        raise DataFileError(f"{path}: expected {names[lang]} problems, but {len(problems) - matching} of "
                            f"{len(problems)} texts are not {names[lang]}: is this the right file?")


# ---------------------------------------------------------------------------------------------
# Records: (line, parsed JSON value or Unreadable) in file order, whatever the layout.


@dataclass(frozen=True)
class Unreadable:
    """A record that is not a JSON value Python's reader can take: its skip reason and why, and
    its id where it parsed (a byte that is not UTF-8): it keeps its MAWPS fold."""
    reason: str
    detail: str
    id: str | None = None


def unreadable(error: ValueError | RecursionError) -> Unreadable:
    """What ``json.loads`` raised on one record, as its skip reason and a message."""
    if isinstance(error, RecursionError):
        return Unreadable(NESTED_TOO_DEEP, "nested deeper than the JSON reader goes")
    if isinstance(error, UnicodeDecodeError):
        return Unreadable(MALFORMED_JSON, f"not UTF-8 text: {error.reason} at byte {error.start}")
    if isinstance(error, json.JSONDecodeError):
        return Unreadable(MALFORMED_JSON, f"{error.msg.removesuffix(' at')} at column {error.colno}")
    return Unreadable(NUMBER_TOO_LONG, "an integer of more than 4,300 digits")  # int() refuses to convert


def _records(path: Path) -> Iterable[tuple[int, Any]]:
    """The file's records: a JSON array's items, JSON Lines (read line by line, on ``\n`` only, as
    often as it is iterated), or objects written one after another (Math23K)."""
    try:
        with path.open("rb") as f:
            lines = [line.removeprefix(_BOM).lstrip() for line in itertools.islice((x for x in f if x.strip()), 2)]
        objects = [line[:1] == b"{" and _parses_as_object(line) for line in lines]
        # JSON Lines: a first line that opens an object, and is one or is followed by one (a broken
        # first line); a whole object before one written over lines ("{" alone) is Math23K's layout.
        opens_over_lines = len(lines) == 2 and lines[1].strip() == b"{"
        if lines and lines[0][:1] == b"{" and (objects[-1] or objects[0] and not opens_over_lines):
            return _JsonLines(path)
        # A byte that is not UTF-8 costs its record, not the file (_unreadable_bytes).
        text = path.read_bytes().removeprefix(_BOM).decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        raise DataFileError(f"problem file not found: {path}") from None
    except OSError as e:
        raise DataFileError(f"cannot read problem file {path}: {e}") from None
    body = text.lstrip()
    if body[:1] == "[":
        return list(_array(text, path))
    return list(_concatenated(text)) if body else []


def _parses_as_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line.decode("utf-8")), dict)
    except (ValueError, RecursionError):
        return False


class _JsonLines:
    """The records of a JSON Lines file, read a line at a time: split on ``\n`` only (a raw U+2028
    inside a string is no line break), each line decoded and parsed on its own."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        with self.path.open("rb") as f:  # a binary file's lines end at b"\n" alone
            for number, raw in enumerate(f, 1):
                try:
                    line = raw.removesuffix(b"\n").decode("utf-8").removeprefix("\ufeff" if number == 1 else "")
                    if line.strip():
                        yield number, json.loads(line)
                except (ValueError, RecursionError) as e:
                    yield number, unreadable(e)


def _array(text: str, path: Path) -> Iterator[tuple[int, Any]]:
    """The items of a JSON array, each with its line. An item too deep or with too long a number
    is one unreadable record; JSON that is not an array at all is the file's error."""
    decoder, line, counted = json.JSONDecoder(), 1, 0
    i = _JSON_SPACE.match(text, text.index("[") + 1).end()
    while i < len(text) and text[i] != "]":
        line, counted = line + text.count("\n", counted, i), i
        start = i
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise DataFileError(f"{path} starts with '[' but is not a valid JSON array: {e}") from None
        except (ValueError, RecursionError) as e:
            end = _value_end(text, i)
            if end is None:
                raise DataFileError(f"{path}: the item at line {line} does not end") from None
            value, i = unreadable(e), end
        yield line, _unreadable_bytes(text, start, i, value) or value
        i = _JSON_SPACE.match(text, i).end()
        if text[i:i + 1] == ",":
            i = _JSON_SPACE.match(text, i + 1).end()
            if text[i:i + 1] in ("]", ""):
                raise DataFileError(f"{path} starts with '[' but is not a valid JSON array: a ',' before the end")
        elif text[i:i + 1] != "]":
            raise DataFileError(f"{path} starts with '[' but is not a valid JSON array: no ',' or ']' at line "
                                f"{line + text.count(chr(10), counted, i)}")
    if i >= len(text) or text[i + 1:].strip():
        raise DataFileError(f"{path} starts with '[' but is not a valid JSON array: it does not end with its ']'")


def _concatenated(text: str) -> Iterator[tuple[int, Any]]:
    """Objects written one after another (Math23K). After a malformed object, reading resumes at
    the next object that opens a line or follows a '}', so one broken record costs one count, not
    the file."""
    decoder, line, counted = json.JSONDecoder(), 1, 0
    i = _SPACE.match(text).end()
    while i < len(text):
        line, counted, start = line + text.count("\n", counted, i), i, i
        try:
            value, i = decoder.raw_decode(text, i)
        except (ValueError, RecursionError) as e:
            end = None if isinstance(e, json.JSONDecodeError) else _value_end(text, i)
            nxt = _NEXT_OBJECT.search(text, i + 1) if end is None else None
            value, i = unreadable(e), end if end is not None else nxt.end() - 1 if nxt else len(text)
        yield line, _unreadable_bytes(text, start, i, value) or value
        i = _SPACE.match(text, i).end()


def _unreadable_bytes(text: str, start: int, end: int, value: Any) -> Unreadable | None:
    """The record ``text[start:end]`` (read as ``value``) as unreadable when it holds a byte that
    is not UTF-8."""
    bad = _NOT_UTF8.search(text, start, end)
    if bad is None:
        return None
    return Unreadable(MALFORMED_JSON, f"not UTF-8 text: byte 0x{ord(bad.group()) - 0xDC00:02x}", _id_of(value))


_STRING_REST = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_BRACKET_OR_QUOTE = re.compile(r'[\[\]{}"]')
_SCALAR = re.compile(r'[^,\]}\s]*')


def _value_end(text: str, i: int) -> int | None:
    """Where the JSON value starting at ``text[i]`` ends, found without recursion (brackets
    counted outside strings), for a value too deep or too long to parse; None when it never ends."""
    if text[i] not in "[{":
        return _SCALAR.match(text, i).end()
    depth, j = 0, i
    while (m := _BRACKET_OR_QUOTE.search(text, j)) is not None:
        if m.group() == '"':
            rest = _STRING_REST.match(text, m.end())
            if rest is None:
                return None
            j = rest.end()
            continue
        depth += 1 if m.group() in "[{" else -1
        j = m.end()
        if depth == 0:
            return j
    return None


# ---------------------------------------------------------------------------------------------
# Fields: a record's id, text, equation and answer, checked.


@dataclass(frozen=True)
class _Record:
    """A record's fields, checked: ``text`` is its segmented text when ``segmented``, else raw."""
    id: str | int
    text: str
    segmented: bool
    equation: str
    answer: str | int | float


def _fields(record, result: ReadResult, where: str) -> _Record | None:
    if not isinstance(record, dict):
        result.skip(NOT_AN_OBJECT, where, f"a JSON {type(record).__name__}, not an object")
        return None
    text_field = "segmented_text" if "segmented_text" in record else "original_text"
    present = {k for k in ("id", text_field, "equation", "ans") if record.get(k) is not None}
    if not {"id", text_field} <= present or not present & {"equation", "ans"}:
        missing = [k for k in ("id", text_field) if k not in present] or ["equation or ans"]
        result.skip(MISSING_FIELD, where, f"no {' and no '.join(missing)}")
        return None
    pid, text = record["id"], record[text_field]
    # A null equation or answer is an absent one: the problem is scored by the other.
    equation, answer = ("" if record.get(k) is None else record[k] for k in ("equation", "ans"))
    bad = [name for name, value, kinds in (("id", pid, (str, int)), (text_field, text, str),
                                           ("equation", equation, str), ("ans", answer, (str, int, float)))
           if not isinstance(value, kinds) or isinstance(value, bool)]
    if bad:
        result.skip(BAD_FIELD_TYPE, where, f"{bad[0]} is a JSON {type(record.get(bad[0])).__name__}")
        return None
    return _Record(pid, text, text_field == "segmented_text", equation, answer)


def _to_problem(record: _Record, lang: str, source: str, result: ReadResult, where: str,
                line: int) -> Problem | None:
    tokens = tuple(segmented_tokens(record.text) if record.segmented else tokenize(record.text, lang))
    if not tokens:
        result.skip(EMPTY_TEXT, where, "no word in its text")
        return None
    return Problem(
        id=str(record.id),
        lang=lang,
        tokens=tokens,
        equation=record.equation.strip(),
        answer=str(record.answer).strip(),
        source=source,
        line=line,
    )
