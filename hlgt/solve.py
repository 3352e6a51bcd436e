"""Solve a new problem with a trained model: raw text in, the equation in infix and the answer out.

    python -m hlgt.solve --model runs/sample-full-seed1/best "一根绳子长12米，用去了(1/4)，还剩多少米？"
    python -m hlgt.solve --model runs/mawps-fold0-full-seed1/best \
        "A farmer has 120 apples. He sells 3/4 of them. How many does he sell?"
    python -m hlgt.solve --model runs/mawps-fold0-full-seed1/best --file problems.jsonl --out answers.jsonl
    python -m hlgt.solve --model runs/sample-full-seed1/best --explain p.html "小明有3个苹果，吃了1个，还剩几个？"
    python -m hlgt.solve --model runs/sample-full-seed1/best --file problems.jsonl --explain-dir pages

The path is the training path, applied to one text: a file record's ``segmented_text`` split on
spaces (the benchmark files' own tokens, as training reads them), else the text tokenised in the
style of the training files (``hlgt.data.text``: Chinese through jieba, English into words,
numbers and punctuation, every number one token; Chinese numerals are words unless the text has
no number; jieba's words are not always the files' segmentation, so a word can be unknown to the
model where the file's tokens are not) →
``extract_quantities`` (a text without quantities is refused with a message) → the model's configured annotator (or
``--annotator``) → ``build_graph`` → one shard row → ``hlgt.inference.predict`` → prefix → infix
with the text's numbers substituted, evaluated exactly for the answer. A ``--file`` of problems is
read a line at a time and solved ``SOLVE_CHUNK`` lines at a time, in bounded memory: each line is
prepared on its own (a bad line gets an error entry naming its file and line, the others go on; a
repeated id is made unique, with a note) and decoded in batches by the evaluation decoder, with
progress; the answers file replaces ``--out`` whole once every line is answered.
``--explain PAGE`` (one text) and ``--explain-dir DIR`` (a file: one page per problem and
``index.html``, written chunk by chunk as the answers are) also write the problem as the model
sees it (``hlgt.explain``), from the one beam search that gives its answer (problems are then
decoded one by one); a text the model cannot read gets a page too, saying why.

The model folder is a ``best/`` folder written by training (``Solver.save`` plus
``run_config.json``); it is all that is needed. Loading it, decoding and formatting the equation
and answer are ``hlgt.inference``'s, tokenising is ``hlgt.data.text``'s; this module owns the
rest of the text's side (quantities, limits, annotation and the graph of one problem), the file
of problems and the command.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from hlgt import explain
from hlgt.data.clean import MAX_TOKENS, over_limits
from hlgt.data.graph import build_graph
from hlgt.data.numbers import Example, extract_quantities
from hlgt.data.problems import UniqueIds, guess_lang, unreadable
from hlgt.data.schema import to_row
from hlgt.data.splits import LANGS
from hlgt.data.srl import AnnotationError, make_annotator
from hlgt.data.text import segmented_tokens, tokenize
from hlgt.data.vocab import UNK
from hlgt.explain import EMPTY_GRAPH, example_row
from hlgt.expr import ExprError, as_written, eval_prefix, infix_with_numbers
from hlgt.pages import PageFolder, check_page_file
from hlgt.progress import Progress
from hlgt.storage import replacing, write_text

# hlgt.inference brings in torch (seconds): it is imported in the functions that load a model, so that
# reading and checking problems, and every one-line error, come before it.

# Checked before tokenising: 20 characters per token the model reads is more than any text needs.
MAX_TEXT_CHARS = 20 * MAX_TOKENS
SOLVE_CHUNK = 1024  # lines of a --file prepared and decoded at a time: its memory, whatever the file's size


@dataclass(frozen=True)
class Solution:
    lang: str
    tokens: list[str]
    numbers: list[str]  # the quantities N0..Nk as written
    not_read: list[str]  # tokens with digits that are no quantity (MP3, 3/0, a 20-digit run)
    unknown: list[str]  # words the model's vocabulary lacks: it reads each as <unk>
    prefix: list[str]  # the model's equation over N0..Nk and constants
    equation: str  # infix, numbers substituted
    answer: float | None
    error: str | None  # why the equation could not be evaluated


def problem_row(text: str, lang: str | None, annotator, segmented: tuple[str, ...] | None = None) -> dict:
    """One raw text (or its ``segmented`` tokens, when given) as a shard row: tokens, quantities,
    the limits, annotation and graph. ``ValueError`` says why a text cannot be solved (empty, too
    long, no quantities, the annotator failed on it, ...)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty problem text")
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"the problem text has {len(text)} characters; at most {MAX_TEXT_CHARS} are read")
    lang = lang or guess_lang(text)
    tokens, quantities = extract_quantities(_tokens(text, lang, segmented))
    if not quantities:
        raise ValueError("no quantities found in the text: write its numbers in digits (in a Chinese text "
                         "without digits, numerals before a measure word are read, as in 三个, and 一半)")
    over = over_limits(tokens, quantities)
    if over is not None:
        raise ValueError(over[1])
    example = Example(id="input", lang=lang, source="solve", tokens=tokens, quantities=quantities, prefix=None,
                      answer=math.nan)
    try:
        annotation = annotator.annotate(tokens, lang)
    except AnnotationError as error:  # one text the annotator cannot take: a user error, not a bug
        raise ValueError(f"the annotator failed on this text: {error}") from None
    return to_row(example, build_graph(example, annotation))


def _tokens(text: str, lang: str, segmented: tuple[str, ...] | None) -> list[str]:
    """A record's own tokens when it has them, else the text tokenised."""
    return list(segmented) if segmented is not None else tokenize(text, lang)


def partial_row(text: str | None, lang: str | None, annotator,
                segmented: tuple[str, ...] | None = None) -> tuple[dict, str | None]:
    """What can be read of a text that ``problem_row`` refuses, for a page that shows why: its
    tokens and quantities (none of a text past ``MAX_TEXT_CHARS``) and its graph when one can be
    built; the second item says why none could."""
    readable = isinstance(text, str) and bool(text.strip()) and len(text) <= MAX_TEXT_CHARS
    lang = lang or (guess_lang(text) if readable else "en")
    if not readable:
        tokens, quantities = [], []
    else:
        tokens, quantities = extract_quantities(_tokens(text, lang, segmented))
    example = Example(id="input", lang=lang, source="solve", tokens=tokens, quantities=quantities, prefix=None,
                      answer=math.nan)
    return example_row(example, annotator) if tokens else (to_row(example, EMPTY_GRAPH), None)


def solve_rows(solver, flat: dict, rows: list[dict], beam_size: int | None = None, progress=None) -> list[Solution]:
    """Decode prepared rows in batches (the evaluation decoder) and read each answer."""
    from hlgt.inference import predict

    prefixes = predict(solver, rows, solver.vocab, variant=flat["data.graph"], batch_size=64,
                       beam_size=beam_size or int(flat["model.beam_size"]), progress=progress)
    return [solution(row, prefix, solver.vocab) for row, prefix in zip(rows, prefixes)]


def solution(row: dict, prefix: list[str], vocab) -> Solution:
    """A row's answer by a prefix equation, as the user reads it (``vocab``: the model's, whose
    unknown words are named)."""

    numbers = list(row["num_texts"])
    answer, error = None, None
    try:
        answer = eval_prefix(prefix, as_written(row["num_values"]))
    except ExprError as e:
        error = str(e)
    return Solution(lang=row["lang"], tokens=list(row["tokens"]), numbers=numbers, not_read=not_read(row),
                    unknown=unknown_words(row, vocab), prefix=prefix, equation=infix_with_numbers(prefix, numbers),
                    answer=answer, error=error)


def not_read(row: dict) -> list[str]:
    """The row's tokens that hold a digit but are no quantity: the user is told, since the model
    cannot use them (``hlgt.data.numbers`` says which numbers are quantities)."""
    slots = set(row["num_pos"])
    return [t for i, t in enumerate(row["tokens"]) if i not in slots and any(c.isdigit() for c in t)]


def unknown_words(row: dict, vocab) -> list[str]:
    """The row's words (its quantities aside) that ``vocab`` lacks, each once in order: the model
    reads them as ``<unk>``. Most of a text unknown is a text the model cannot read (another
    language, another segmentation)."""
    slots, unk = set(row["num_pos"]), vocab.word_id(UNK)
    unknown = [t for i, t in enumerate(row["tokens"]) if i not in slots and vocab.word_id(t) == unk]
    return list(dict.fromkeys(unknown))


def mostly_unknown(s: Solution) -> bool:
    """Over half the text's words (its quantities aside) unknown to the model."""
    unknown = set(s.unknown)
    return 2 * sum(t in unknown for t in s.tokens) > len(s.tokens) - len(s.numbers)


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


def explain_text(model_dir: str | Path, text: str, page: str | Path, lang: str | None = None,
                 annotator: str | None = None, beam_size: int | None = None) -> Solution:
    """``solve_text``, and the problem as the model sees it written to the page ``page`` (checked
    before anything else). A text the model cannot read still gets its page, from what could be
    read of it; the ``ValueError`` saying why follows."""
    from hlgt.inference import load_model, run_config

    page = check_page_file(page)
    flat = run_config(model_dir)
    lang, annotate = lang or model_lang(flat), model_annotator(flat, annotator)
    about = explain.about_model(model_dir, flat)
    try:
        row = problem_row(text, lang, annotate)
    except ValueError as error:
        row, no_graph = partial_row(text, lang, annotate)
        notice = f"{error}; {no_graph}" if no_graph else str(error)
        write_text(page, explain.page(row, flat["data.graph"], notice=notice, about=about, **explain.reads(flat)))
        raise ValueError(f"{error} (the page {page} shows what could be read)") from None
    solver, flat = load_model(model_dir)
    decoded = explain.decode(solver, row, flat["data.graph"], beam_size)
    write_text(page, explain.page(row, flat["data.graph"], decoded=decoded, about=about, **explain.reads(flat)))
    return solution(row, top(decoded), solver.vocab)


@dataclass(frozen=True)
class Request:
    """One line of a ``--file``: where it is (``FILE:LINE``), the problem's id and text (and its
    ``segmented_text``'s tokens, when the record has one), or why it cannot be solved."""
    where: str
    id: str
    text: str | None
    error: str | None
    segmented: tuple[str, ...] | None = None


def read_requests(path: str | Path, notes: list[str] | None = None) -> Iterator[Request]:
    """A ``--file``'s lines as requests, read one at a time (on ``\n`` only: a raw U+2028 inside a
    string is no line break): JSON objects with ``text`` (or ``original_text``, the datasets' name
    for it; a benchmark record's ``segmented_text``, when it has one, gives the tokens, as training
    reads them) and an optional ``id`` (a string or an integer; default: the line number). A line that is
    not such an object gets an error naming the file and line, blank lines nothing; a repeated id is
    made unique, with a note in ``notes``. The file is checked now: one whose first line is not
    UTF-8 text is no JSON Lines file at all."""
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
                              f"{where}: \"id\" is {json.dumps(pid)[:40]}: give a string or an integer, or no id")
                continue
            unique = ids.take(str(pid))
            if unique != str(pid):
                notes.append(f"{where}: id {str(pid)!r} repeats an earlier line's: answered as {unique!r}")
            text = record.get("text", record.get("original_text")) if isinstance(record, dict) else None
            segmented = record.get("segmented_text") if isinstance(record, dict) else None
            if segmented is not None and not isinstance(segmented, str):
                yield Request(where, unique, None, f"{where}: \"segmented_text\" is not a string")
                continue
            text = segmented if text is None else text
            if not isinstance(text, str):
                yield Request(where, unique, None, f"{where}: not an object with a \"text\" (or \"original_text\", "
                                                   "as the datasets write it) string")
                continue
            yield Request(where, unique, text, None, None if segmented is None else tuple(segmented_tokens(segmented)))


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


def prepare_requests(requests: list[Request], annotator, lang: str | None) -> tuple[list[dict], dict[int, dict]]:
    """The answer entries of some requests begun (id, or id and error) and the rows of those that
    can be solved (named by the request's id), by their place among the requests."""
    results: list[dict] = []
    rows: dict[int, dict] = {}
    for k, request in enumerate(requests):
        error = request.error
        if error is None:
            try:
                rows[k] = {**problem_row(request.text, lang, annotator, request.segmented), "id": request.id}
            except Exception as e:  # one bad line must not end a file of 100,000
                error = f"{request.where}: {e if isinstance(e, ValueError) else f'{type(e).__name__}: {e}'}"
        results.append({"id": request.id, "error": error} if error else {"id": request.id})
    return results, rows


def answer_rows(results: list[dict], solutions: dict[int, Solution]) -> None:
    """Complete the entries of the decoded rows, by their place: equation and answer, or the error."""
    from hlgt.expr import format_answer

    for k, s in solutions.items():
        results[k].update(equation=f"x = {s.equation}", answer=None if s.answer is None else format_answer(s.answer))
        if s.not_read:
            results[k]["not_read"] = s.not_read
        if s.unknown:
            results[k]["unknown_words"] = s.unknown
        if s.error is not None:
            results[k]["error"] = f"the equation does not evaluate: {s.error}"


def solve_file(model_dir: str | Path, in_path: str | Path, out_path: str | Path | None = None,
               lang: str | None = None, annotator: str | None = None, beam_size: int | None = None,
               notes: list[str] | None = None, explain_dir: str | Path | None = None) -> tuple[int, int]:
    """Solve every problem of a JSON Lines file into ``out_path`` (one line per problem, in input
    order: id, equation and answer, or id and error) and/or ``explain_dir`` (one page per problem
    and an index, ``FilePages``, whose one beam search per problem gives its answer too),
    ``SOLVE_CHUNK`` lines at a time, so that a file of any size is solved in bounded memory;
    ``out_path`` is replaced when all are written. Both paths are checked before any work. Returns
    (solved, errors); notes about lines go to ``notes``."""
    from hlgt.inference import load_model

    if out_path is None and explain_dir is None:
        raise ValueError("solving a file needs an --out file or an --explain-dir folder")
    if out_path is not None:
        check_out(in_path, out_path)
    pages = FilePages(explain_dir) if explain_dir is not None else None
    requests = read_requests(in_path, notes)
    solver, flat = load_model(model_dir)
    annotate = model_annotator(flat, annotator)
    getattr(annotate, "load", lambda: None)()  # a model that cannot load fails once, before any line
    lang = lang or model_lang(flat)
    progress, done, errors = Progress(None, "solve"), 0, 0
    with (replacing(out_path) if out_path is not None else contextlib.nullcontext()) as out, \
            (pages.open(model_dir, flat) if pages is not None else contextlib.nullcontext()):
        while chunk := list(itertools.islice(requests, SOLVE_CHUNK)):
            results, rows = prepare_requests(chunk, annotate, lang)
            if pages is None:
                answer_rows(results, dict(zip(rows, solve_rows(solver, flat, list(rows.values()), beam_size))))
            else:
                decoded = pages.decode(solver, chunk, results, rows, beam_size)
                answer_rows(results, {k: solution(rows[k], top(d), solver.vocab) for k, d in decoded.items()})
                pages.add(chunk, results, rows, decoded, lang, annotate)
            if out is not None:
                out.write("".join(json.dumps(result, ensure_ascii=False) + "\n" for result in results))
            errors += sum("error" in result for result in results)
            done += len(chunk)
            progress.update(done)
    progress.end()
    return done - errors, errors


class FilePages:
    """A ``--file``'s pages (``--explain-dir``): one per request, a refused one's from what could
    be read of it under its error, added chunk by chunk, and the index once the file is read; the
    chunk's rows decoded for them (``decode``) give the answers too. The folder
    (``hlgt.pages.PageFolder``) is checked when this is made, before any work."""

    def __init__(self, folder: str | Path):
        self.folder = PageFolder(folder)
        self.entries: list[tuple[str, list[str]]] = []

    @contextlib.contextmanager
    def open(self, model_dir: str | Path, flat: dict) -> Iterator[FilePages]:
        self.flat, self.about = flat, explain.about_model(model_dir, flat)
        with self.folder:
            yield self
            self.folder.index(explain.index_page(
                f"{len(self.entries)} problems of a file", ["id", "text", "equation (answer) or error"],
                self.entries, about=self.about))

    def decode(self, solver, requests: list[Request], results: list[dict], rows: dict[int, dict],
               beam_size: int | None) -> dict[int, explain.Decoded]:
        """The rows decoded one by one, seen from inside: each problem's answer and page come from
        this one beam search. A row that fails to decode gets that error as its entry."""
        decoded = {}
        for k, row in rows.items():
            try:
                decoded[k] = explain.decode(solver, row, self.flat["data.graph"], beam_size)
            except Exception as error:  # one problem must not stop the file's others
                results[k]["error"] = f"{requests[k].where}: decoding failed: {type(error).__name__}: {error}"
        return decoded

    def add(self, requests: list[Request], results: list[dict], rows: dict[int, dict],
            decoded: dict[int, explain.Decoded], lang: str | None, annotate) -> None:
        for k, (request, result) in enumerate(zip(requests, results)):
            try:
                html = self._page(request, result, rows.get(k), decoded.get(k), lang, annotate)
            except Exception as error:  # one problem's page must not stop the file's other pages
                html = explain.error_page(request.id, request.text or "", f"{type(error).__name__}: {error}",
                                          about=self.about)
            outcome = result.get("error") or f"{result['equation']}  ({result['answer']})"
            self.entries.append((self.folder.add(request.id, html), [request.id, (request.text or "")[:120], outcome]))

    def _page(self, request: Request, result: dict, row: dict | None, decoded: explain.Decoded | None,
              lang: str | None, annotate) -> str:
        variant, page = self.flat["data.graph"], {"about": self.about, **explain.reads(self.flat)}
        if row is None:
            row, no_graph = partial_row(request.text, lang, annotate, request.segmented)
            notice = "; ".join(filter(None, [result["error"], no_graph]))
            return explain.page({**row, "id": request.id}, variant, notice=notice, **page)
        if decoded is None:
            return explain.page(row, variant, notice=result["error"], notice_title="The model failed on this problem",
                                **page)
        return explain.page(row, variant, decoded=decoded, **page)


def top(decoded: explain.Decoded) -> list[str]:
    """The beam's best equation: the answer (``hlgt.inference.predict`` decodes the same)."""
    return decoded.candidates[0][0] if decoded.candidates else []


if __name__ == "__main__":  # python -m hlgt.solve: the command hlgt-solve
    from hlgt.commands.solve import run

    run()
