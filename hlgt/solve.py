"""Solve a new problem with a trained model: raw text in, the equation in infix and the answer out.

    python -m hlgt.solve --model runs/sample-full-seed1/best "一根绳子长12米，用去了(1/4)，还剩多少米？"
    python -m hlgt.solve --model runs/mawps-fold0-full-seed1/best "A farmer has 120 apples. He sells 3/4 of them. How many does he sell?"
    python -m hlgt.solve --model runs/mawps-fold0-full-seed1/best --file problems.jsonl --out answers.jsonl

The path is the training path, applied to one text: tokenise as the training files are segmented
(``hlgt.data.text``: Chinese through jieba, English into words, numbers and punctuation, every
number one token; Chinese numerals are words unless the text has no number) →
``extract_quantities`` (a text without quantities is refused with a message) → the model's configured annotator (or
``--annotator``) → ``build_graph`` → one shard row → ``hlgt.inference.predict`` → prefix → infix
with the text's numbers substituted, evaluated exactly for the answer. A ``--file`` of problems is
read a line at a time and solved ``SOLVE_CHUNK`` lines at a time, in bounded memory: each line is
prepared on its own (a bad line gets an error entry naming its file and line, the others go on; a
repeated id is made unique, with a note) and decoded in batches by the evaluation decoder, with
progress; the answers file replaces ``--out`` whole once every line is answered.

The model folder is a ``best/`` folder written by training (``Solver.save`` plus
``run_config.json``); it is all that is needed. Loading it, decoding and formatting the equation
and answer are ``hlgt.inference``'s, tokenising is ``hlgt.data.text``'s; this module owns the
rest of the text's side (quantities, limits, annotation and the graph of one problem), the file
of problems and the command.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from hlgt.commands.cli import positive_int
from hlgt.progress import Progress
from hlgt.data.clean import MAX_TOKENS, over_limits
from hlgt.data.graph import build_graph
from hlgt.data.numbers import Example, extract_quantities
from hlgt.data.problems import MAX_NOTES, UniqueIds, guess_lang, unreadable
from hlgt.data.splits import LANGS
from hlgt.data.schema import to_row
from hlgt.data.srl import make_annotator
from hlgt.data.text import tokenize
from hlgt.expr import ExprError, eval_prefix
from hlgt.storage import replacing

# Checked before tokenising: 20 characters per token the model reads is more than any text needs.
MAX_TEXT_CHARS = 20 * MAX_TOKENS
SOLVE_CHUNK = 1024  # lines of a --file prepared and decoded at a time: its memory, whatever the file's size


@dataclass(frozen=True)
class Solution:
    lang: str
    tokens: list[str]
    numbers: list[str]  # the quantities N0..Nk as written
    not_read: list[str]  # tokens with digits that are no quantity (MP3, 3/0, a 20-digit run)
    prefix: list[str]  # the model's equation over N0..Nk and constants
    equation: str  # infix, numbers substituted
    answer: float | None
    error: str | None  # why the equation could not be evaluated


def problem_row(text: str, lang: str | None, annotator) -> dict:
    """One raw text as a shard row: tokens, quantities, the limits, annotation and graph.
    ``ValueError`` says why a text cannot be solved (empty, too long, no quantities, ...)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty problem text")
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"the problem text has {len(text)} characters; at most {MAX_TEXT_CHARS} are read")
    lang = lang or guess_lang(text)
    tokens, quantities = extract_quantities(tokenize(text, lang))
    if not quantities:
        raise ValueError("no quantities found in the text: write its numbers in digits (in a Chinese text "
                         "without digits, numerals before a measure word are read, as in 三个, and 一半)")
    over = over_limits(tokens, quantities)
    if over is not None:
        raise ValueError(over[1])
    example = Example(id="input", lang=lang, source="solve", tokens=tokens, quantities=quantities, prefix=None,
                      answer=math.nan)
    return to_row(example, build_graph(example, annotator.annotate(tokens, lang)))


def solve_rows(solver, flat: dict, rows: list[dict], beam_size: int | None = None, progress=None) -> list[Solution]:
    """Decode prepared rows in batches (the evaluation decoder) and read each answer."""
    from hlgt.inference import infix_with_numbers, predict

    prefixes = predict(solver, rows, solver.vocab, variant=flat["data.graph"], batch_size=64,
                       beam_size=beam_size or int(flat["model.beam_size"]), progress=progress)
    out = []
    for row, prefix in zip(rows, prefixes):
        numbers = list(row["num_texts"])
        answer, error = None, None
        try:
            answer = eval_prefix(prefix, list(row["num_values"]))
        except ExprError as e:
            error = str(e)
        out.append(Solution(lang=row["lang"], tokens=list(row["tokens"]), numbers=numbers, not_read=not_read(row),
                            prefix=prefix, equation=infix_with_numbers(prefix, numbers), answer=answer, error=error))
    return out


def not_read(row: dict) -> list[str]:
    """The row's tokens that hold a digit but are no quantity: the user is told, since the model
    cannot use them (``hlgt.data.numbers`` says which numbers are quantities)."""
    slots = set(row["num_pos"])
    return [t for i, t in enumerate(row["tokens"]) if i not in slots and any(c.isdigit() for c in t)]


def model_annotator(flat: dict, annotator: str | None):
    """The annotator the model was trained with, or ``annotator`` when given."""
    name = annotator or flat["data.annotator"]
    return make_annotator(name, flat["data.annotator_model"] if name == flat["data.annotator"] else "")


def model_lang(flat: dict) -> str | None:
    """The language of the model's dataset (a text of it is read in that language, pure arithmetic
    too); None for the sample data, which has both."""
    return LANGS.get(flat["data.dataset"])


def solve_text(model_dir: str | Path, text: str, lang: str | None = None, annotator: str | None = None,
               beam_size: int | None = None) -> Solution:
    """Solve one problem written in ``text`` (``lang`` None: the model's language, else guessed).
    The text is checked before the model is loaded: a refusal is immediate."""
    # Imported here, not at the top: it brings in torch and the model, which ``--help`` and
    # ``tokenize`` do without.
    from hlgt.inference import load_model, run_config

    flat = run_config(model_dir)
    row = problem_row(text, lang or model_lang(flat), model_annotator(flat, annotator))
    solver, flat = load_model(model_dir)
    return solve_rows(solver, flat, [row], beam_size)[0]


@dataclass(frozen=True)
class Request:
    """One line of a ``--file``: where it is (``FILE:LINE``), the problem's id and text, or why it
    cannot be solved."""
    where: str
    id: str
    text: str | None
    error: str | None


def read_requests(path: str | Path, notes: list[str] | None = None) -> Iterator[Request]:
    """A ``--file``'s lines as requests, read one at a time (on ``\n`` only: a raw U+2028 inside a
    string is no line break): JSON objects with ``text`` and an optional ``id`` (a string or a
    number; default: the line number). A line that is not such an object gets an error naming the
    file and line, blank lines nothing; a repeated id is made unique, with a note in ``notes``. The
    file is checked now: one whose first line is not UTF-8 text is no JSON Lines file at all."""
    path = Path(path)
    with path.open("rb") as f:
        first = next((line for line in f if line.strip()), b"").removeprefix(b"\xef\xbb\xbf")
    try:
        first.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"cannot read {path}: not UTF-8 text ({e.reason} at byte {e.start}); --file takes "
                         "JSON Lines") from None
    return _requests(path, notes if notes is not None else [])


def _requests(path: Path, notes: list[str]) -> Iterator[Request]:
    ids = UniqueIds()
    with path.open("rb") as f:  # a binary file's lines end at b"\n" alone
        for number, raw in enumerate(f, 1):
            where = f"{path}:{number}"
            try:
                line = raw.removesuffix(b"\n").decode("utf-8").removeprefix("\ufeff" if number == 1 else "")
                if not line.strip():
                    continue
                record = json.loads(line)
            except (ValueError, RecursionError) as e:
                yield Request(where, ids.take(str(number)), None, f"{where}: not JSON ({unreadable(e).detail})")
                continue
            pid = record.get("id", number) if isinstance(record, dict) else number
            if not isinstance(pid, (str, int)) or isinstance(pid, bool):
                yield Request(where, ids.take(str(number)), None,
                              f"{where}: \"id\" is {json.dumps(pid)[:40]}: give a string or a number, or no id")
                continue
            unique = ids.take(str(pid))
            if unique != str(pid):
                notes.append(f"{where}: id {str(pid)!r} repeats an earlier line's: answered as {unique!r}")
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                yield Request(where, unique, None, f"{where}: not an object with a \"text\" string")
                continue
            yield Request(where, unique, record["text"], None)


def check_out(in_path: str | Path, out_path: str | Path) -> None:
    """Refuse, before anything is solved, an ``out_path`` that would overwrite ``in_path`` or that
    cannot be written (a folder, in a missing or read-only folder)."""
    out = Path(out_path)
    if out.resolve() == Path(in_path).resolve():
        raise ValueError(f"--out {out_path} is the --file itself: the answers would overwrite the problems")
    if out.is_dir():
        raise IsADirectoryError(f"--out {out_path} is a folder: give the answers' file name")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"--out {out_path}: there is no folder {out.parent}")
    if not os.access(out.parent, os.W_OK):
        raise PermissionError(f"--out {out_path}: the folder {out.parent} is not writable")


def solve_requests(solver, flat: dict, requests: list[Request], annotator, lang: str | None,
                   beam_size: int | None = None) -> list[dict]:
    """The answer entries of some requests, in their order: id, equation and answer, or id and error."""
    from hlgt.inference import format_answer

    results: list[dict] = []
    rows, slots = [], []
    for request in requests:
        error = request.error
        if error is None:
            try:
                rows.append(problem_row(request.text, lang, annotator))
                slots.append(len(results))
            except Exception as e:  # one bad line must not end a file of 100,000
                error = f"{request.where}: {e if isinstance(e, ValueError) else f'{type(e).__name__}: {e}'}"
        results.append({"id": request.id, "error": error} if error else {"id": request.id})
    for slot, s in zip(slots, solve_rows(solver, flat, rows, beam_size) if rows else []):
        results[slot].update(equation=f"x = {s.equation}", answer=None if s.answer is None else format_answer(s.answer))
        if s.not_read:
            results[slot]["not_read"] = s.not_read
        if s.error is not None:
            results[slot]["error"] = f"the equation does not evaluate: {s.error}"
    return results


def solve_file(model_dir: str | Path, in_path: str | Path, out_path: str | Path, lang: str | None = None,
               annotator: str | None = None, beam_size: int | None = None,
               notes: list[str] | None = None) -> tuple[int, int]:
    """Solve every problem of a JSON Lines file into ``out_path`` (one line per problem, in input
    order: id, equation and answer, or id and error), ``SOLVE_CHUNK`` lines at a time, so that a
    file of any size is solved in bounded memory; ``out_path`` is replaced when all are written.
    Returns (solved, errors); notes about lines go to ``notes``."""
    from hlgt.inference import load_model

    check_out(in_path, out_path)
    requests = read_requests(in_path, notes)
    solver, flat = load_model(model_dir)
    annotate = model_annotator(flat, annotator)
    getattr(annotate, "load", lambda: None)()  # a model that cannot load fails once, before any line
    lang = lang or model_lang(flat)
    progress, done, errors = Progress(None, "solve"), 0, 0
    with replacing(out_path) as out:
        while chunk := list(itertools.islice(requests, SOLVE_CHUNK)):
            for result in solve_requests(solver, flat, chunk, annotate, lang, beam_size):
                out.write(json.dumps(result, ensure_ascii=False) + "\n")
                errors += "error" in result
            done += len(chunk)
            progress.update(done)
    progress.end()
    return done - errors, errors


def main(argv: list[str] | None = None) -> int:
    # No abbreviations: a misspelt or shortened option is an error, not another option's value.
    p = argparse.ArgumentParser(prog="python -m hlgt.solve", allow_abbrev=False,
                                description="Solve a math word problem (or a file of them) with a trained model.")
    p.add_argument("--model", required=True, help="a trained model folder (<run>/best)")
    p.add_argument("--lang", choices=["zh", "en"], default=None, help="default: the model's dataset's; for the sample data's, guessed from each text")
    p.add_argument("--annotator", default=None, help="offline | ltp | hanlp (default: the model's)")
    p.add_argument("--beam-size", type=positive_int, default=None, help="default: the model's")
    p.add_argument("--file", default=None, help="JSON Lines of {\"text\": ..., \"id\": ...} to solve (with --out)")
    p.add_argument("--out", default=None, help="where --file's answers go (JSON Lines: id, equation, answer or error)")
    p.add_argument("text", nargs="*", help="the problem text")
    args = p.parse_args(argv)
    if args.text and (args.file or args.out):
        p.error("--file and --out go together, for a file of problems: give them or a problem text")
    if not args.text and not (args.file and args.out):
        p.error("give a problem text, or --file FILE with --out FILE")
    if args.file:
        notes: list[str] = []
        solved, errors = solve_file(args.model, args.file, args.out, lang=args.lang, annotator=args.annotator,
                                    beam_size=args.beam_size, notes=notes)
        print(f"[solve] {solved} solved, {errors} with an error -> {args.out}")
        for note in notes[:MAX_NOTES]:
            print(f"[solve] note: {note}")
        if len(notes) > MAX_NOTES:
            print(f"[solve] note: {len(notes) - MAX_NOTES} more repeated ids made unique")
        return 0
    from hlgt.inference import format_answer  # after parsing: see solve_text

    s = solve_text(args.model, " ".join(args.text), lang=args.lang, annotator=args.annotator, beam_size=args.beam_size)
    print(f"tokens:   {' '.join(s.tokens)}")
    print(f"numbers:  {', '.join(f'N{i}={n}' for i, n in enumerate(s.numbers)) or 'none'}")
    if s.not_read:
        print(f"not read: {', '.join(s.not_read)} (digits, but no quantity the model can use)")
    print(f"equation: x = {s.equation}")
    if s.error is not None:
        print(f"answer:   none (the equation does not evaluate: {s.error})")
        return 2
    print(f"answer:   {format_answer(s.answer)}")
    return 0


if __name__ == "__main__":
    from hlgt.commands.cli import run_command

    sys.exit(run_command(main, "python -m hlgt.solve"))
