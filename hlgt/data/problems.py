"""Any supported problem file → typed ``Problem`` records.

Three layouts are read, detected from the file itself:

* Math23K's 7-line format: pretty-printed JSON objects written one after another (not one JSON
  document, not one object per line);
* one JSON array of objects (MAWPS);
* JSON Lines, one object per line (APE210K and the project's own sample files).

A record needs ``id``, a text and at least one of ``equation`` and ``ans``. The benchmark files
give ``segmented_text`` (tokens split by spaces, read as they are) and both ``equation`` and
``ans``. The generic format, for files of other sources (SVAMP, ASDiv-A, your own): a JSON list
or JSON Lines of objects with ``id``, ``original_text`` (raw text, tokenised as ``solve`` does it,
``hlgt.data.text``) and ``equation`` (``x=...``) and/or ``ans``; without ``ans`` the answer is the
equation's value, without ``equation`` the problem is scored by its answer only.
Values are taken with the standard ``json`` module, never pandas/Arrow, so ids stay strings
(MAWPS writes them as ints) and answers stay exactly as written (MAWPS writes floats).

A record that cannot be used is skipped and counted under a named reason in
``ReadResult.skipped`` — never dropped silently, never a crash. A file that cannot be opened, or a
JSON array that does not parse as a whole, raises ``DataFileError`` naming the file.
"""
from __future__ import annotations

import collections
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from hlgt.data.text import tokenize

# Reader skip reasons (the report prints them under these names).
MALFORMED_JSON = "malformed_json"
NOT_AN_OBJECT = "not_an_object"
MISSING_FIELD = "missing_field"
BAD_FIELD_TYPE = "bad_field_type"
EMPTY_TEXT = "empty_text"

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


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


@dataclass
class ReadResult:
    problems: list[Problem]
    skipped: collections.Counter = field(default_factory=collections.Counter)  # reason -> count
    records: int = 0  # records seen in the file (problems + skipped)


def guess_lang(text: str) -> str:
    """``"zh"`` when the text holds a CJK character, else ``"en"``."""
    return "zh" if _CJK.search(text) else "en"


def source_name(path: str | Path) -> str:
    """``.../math23k/Math_23K_train.json`` → ``"math23k/Math_23K_train.json"``."""
    p = Path(path)
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def read_problems(path: str | Path, lang: str | None = None) -> ReadResult:
    """Read one file in any of the three layouts; ``lang`` None guesses it from the file's texts."""
    path = Path(path)
    if lang not in (None, "zh", "en"):
        raise ValueError(f"lang must be 'zh', 'en' or None, got {lang!r}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise DataFileError(f"problem file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataFileError(f"cannot read problem file {path}: {e}") from None
    result = ReadResult(problems=[])
    source = source_name(path)
    records = [r for r in (_fields(record, result.skipped) for record in _records(text, path, result.skipped))
               if r is not None]
    # One language per file, its texts' majority guess: a Math23K problem that is pure arithmetic
    # ("840/6/70+630=．") is still Chinese data, and a raw one is tokenised as Chinese.
    guesses = [guess_lang(r.text) for r in records if r.text.strip()]
    file_lang = lang or ("zh" if 2 * guesses.count("zh") >= len(guesses) else "en")
    for record in records:
        problem = _to_problem(record, file_lang, source, result.skipped)
        if problem is not None:
            result.problems.append(problem)
    if not result.problems:
        skipped = f" (skipped: {dict(result.skipped)})" if result.skipped else ""
        raise DataFileError(f"{path} holds no readable problem{skipped}")
    if lang is not None:
        _check_language(path, result.problems, lang)
    result.records = len(result.problems) + sum(result.skipped.values())
    return result


def _check_language(path: Path, problems: list[Problem], lang: str) -> None:
    """A file read as ``lang`` whose texts are mostly in the other language is the wrong file
    (MAWPS saved under a Math23K name would otherwise train as 2,373 "Chinese" problems)."""
    matching = sum(guess_lang(" ".join(p.tokens)) == lang for p in problems)
    if 2 * matching < len(problems):
        names = {"zh": "Chinese", "en": "English"}
        raise DataFileError(f"{path}: expected {names[lang]} problems, but {len(problems) - matching} of "
                            f"{len(problems)} texts are not {names[lang]}: is this the right file?")


def _records(text: str, path: Path, skipped: collections.Counter) -> list:
    """Parsed JSON values of the file; malformed pieces are counted under ``malformed_json``."""
    body = text.lstrip()
    if not body:
        return []
    if body[0] == "[":
        try:
            data = json.loads(body)
        except json.JSONDecodeError as e:
            raise DataFileError(f"{path} starts with '[' but is not a valid JSON array: {e}") from None
        if not isinstance(data, list):
            raise DataFileError(f"{path}: expected a JSON array of problems")
        return data
    first_line = body.split("\n", 1)[0].strip()
    if _parses_as_object(first_line):
        return _json_lines(text, skipped)
    return _concatenated(text, skipped)


def _parses_as_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _json_lines(text: str, skipped: collections.Counter) -> list:
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            skipped[MALFORMED_JSON] += 1
    return out


def _concatenated(text: str, skipped: collections.Counter) -> list:
    """Objects written one after another (Math23K). After a malformed object, reading resumes at
    the next line that opens an object, so one broken record costs one count, not the file."""
    decoder = json.JSONDecoder()
    out, i, n = [], 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return out
        try:
            value, i = decoder.raw_decode(text, i)
            out.append(value)
        except json.JSONDecodeError:
            skipped[MALFORMED_JSON] += 1
            nxt = re.compile(r"^\{", re.M).search(text, i + 1)
            if nxt is None:
                return out
            i = nxt.start()


@dataclass(frozen=True)
class _Record:
    """A record's fields, checked: ``text`` is its segmented text when ``segmented``, else raw."""
    id: str | int
    text: str
    segmented: bool
    equation: str
    answer: str | int | float


def _fields(record, skipped: collections.Counter) -> _Record | None:
    if not isinstance(record, dict):
        skipped[NOT_AN_OBJECT] += 1
        return None
    text_field = "segmented_text" if "segmented_text" in record else "original_text"
    present = {k for k in ("id", text_field, "equation", "ans") if record.get(k) is not None}
    if not {"id", text_field} <= present or not present & {"equation", "ans"}:
        skipped[MISSING_FIELD] += 1
        return None
    pid, text = record["id"], record[text_field]
    equation, answer = record.get("equation", ""), record.get("ans", "")
    if (
        not isinstance(pid, (str, int))
        or isinstance(pid, bool)
        or not isinstance(text, str)
        or not isinstance(equation, str)
        or not isinstance(answer, (str, int, float))
        or isinstance(answer, bool)
    ):
        skipped[BAD_FIELD_TYPE] += 1
        return None
    return _Record(pid, text, text_field == "segmented_text", equation, answer)


def _to_problem(record: _Record, lang: str, source: str, skipped: collections.Counter) -> Problem | None:
    tokens = tuple(record.text.split() if record.segmented else tokenize(record.text, lang))
    if not tokens:
        skipped[EMPTY_TEXT] += 1
        return None
    return Problem(
        id=str(record.id),
        lang=lang,
        tokens=tokens,
        equation=record.equation.strip(),
        answer=str(record.answer).strip(),
        source=source,
    )
