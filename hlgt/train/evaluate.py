"""Scoring: predicted prefix equations → accuracies, the Table-4 breakdown, a predictions file.

Two accuracies, as in the paper:
  * value accuracy: the predicted equation evaluates (exactly, ``hlgt.expr.eval_prefix``) to the
    gold answer within THE project tolerance (``values_match``);
  * equation accuracy: the predicted prefix equals the gold prefix token for token once every
    slot is read as its number as written (GTS's rule: where two quantities are the same number,
    either one is the gold equation's; a constant equals a slot holding the same text).
A prediction that does not evaluate (malformed, division by zero, missing slot) is wrong, and the
reason is kept in the predictions file. A problem whose gold equation could not be represented
(``prefix`` null in the shard) still counts: its equation is wrong by definition, its value may
be right.

The per-number-count table is the paper's Table 4: rows ``<=1, 2, 3, 4, 5, 6, >=7`` numbers in
the problem text, each with its share of the split and its accuracy.

``evaluate`` predicts with ``hlgt.inference.predict`` (no Ray, no W&B: the caller passes the
device) and scores; ``tree_loss_sum`` is validation's teacher-forced loss; everything else here is
plain Python on rows and token lists.

A trained model on one split of its own dataset (shards built or reused from its run config, or a
prebuilt ``--shards`` folder), or on any problem file (``--data``: a benchmark file or the generic
format of ``hlgt.data.problems``, read, cleaned and annotated as a validation split, with the
model's vocabulary and constants), printing both accuracies, Table 4 and the problems scored per
second (a file's end to end: read, prepared, decoded and scored; a split's once its shards are read):

    python -m hlgt.train.evaluate --model runs/mawps-f0-full-30ep/best --split test [--bf16] [--out DIR]
    python -m hlgt.train.evaluate --model runs/mawps-f0-full-30ep/best --data svamp.jsonl --out DIR
    python -m hlgt.train.evaluate --model runs/mawps-f0-full-30ep/best --split test --out DIR --explain-wrong 20

``--explain-wrong N`` writes, into ``DIR/explain_<split>/``, the pages (``hlgt.explain``) of the first N
problems solved wrongly, the gold equation beside the model's, and an index with the accuracy by
number of quantities (Table 4) as a chart.

With ``--data``, the file is read, prepared and decoded ``hlgt.data.annotate.FILE_CHUNK`` problems at a time, in
bounded memory, and the predictions file is written as it goes and replaces the old one whole at
the end (``--out`` is checked before anything is evaluated). Problems that cannot be scored
(unreadable records, over the limits, an annotation that fails) are counted and reported, the
first few named by file and line, and the accuracy is given both over the scored problems and
over every problem in the file (those counted wrong). A scored problem whose gold
equation the model cannot write (a constant it never learned) is counted as unanswerable; it is
still right when the model finds its value another way. Words the model never saw read as <unk>.
"""
from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, Iterable, Mapping, Sequence

import torch

from hlgt import explain
from hlgt import metrics as M
from hlgt.data.annotate import FileCounts
from hlgt.data.collate import collate, trainable
from hlgt.draw import bar_chart
from hlgt.expr import (
    ExprError,
    as_written,
    eval_prefix,
    format_answer,
    infix_with_numbers,
    numbers_written,
    values_match,
)
from hlgt.inference import predict
from hlgt.pages import PageFolder
from hlgt.storage import folder_kind, replacing, write_text
from hlgt.train.checkpoint import holds_run

NUMBER_BUCKETS = ("<=1", "2", "3", "4", "5", "6", ">=7")


def number_bucket(n_numbers: int) -> str:
    """Table-4 row of a problem with ``n_numbers`` quantities in its text."""
    if n_numbers <= 1:
        return "<=1"
    if n_numbers >= 7:
        return ">=7"
    return str(n_numbers)


@dataclass(frozen=True)
class Scored:
    """One problem's verdict: everything the predictions file holds."""

    id: str
    text: str
    predicted: str  # infix, numbers substituted
    gold: str  # infix, numbers substituted
    predicted_prefix: list[str]
    gold_prefix: list[str] | None
    values: list[float]
    answer: float
    predicted_value: float | None
    value_correct: bool
    equation_correct: bool
    n_numbers: int
    error: str | None  # why the prediction could not be evaluated


def score(row: Mapping[str, Any], predicted: Sequence[str]) -> Scored:
    """Score one prediction against one shard row (keys: id, text, num_values, num_texts, prefix, answer)."""
    values = [float(v) for v in row["num_values"]]
    texts = [str(t) for t in row["num_texts"]]
    gold = None if row["prefix"] is None else [str(t) for t in row["prefix"]]
    predicted = [str(t) for t in predicted]
    predicted_value, error = None, None
    try:
        predicted_value = eval_prefix(predicted, as_written(values))  # as solve and the pages evaluate it
    except ExprError as e:
        error = str(e)
    return Scored(
        id=str(row["id"]),
        text=str(row["text"]),
        predicted=infix_with_numbers(predicted, texts),
        gold=infix_with_numbers(gold, texts),
        predicted_prefix=predicted,
        gold_prefix=gold,
        values=values,
        answer=float(row["answer"]),
        predicted_value=predicted_value,
        value_correct=predicted_value is not None and values_match(predicted_value, float(row["answer"])),
        equation_correct=gold is not None and numbers_written(predicted, texts) == numbers_written(gold, texts),
        n_numbers=len(values),
        error=error,
    )


@dataclass(frozen=True)
class BucketRow:
    bucket: str
    count: int
    proportion: float
    value_acc: float | None  # None where the bucket holds no problem
    equation_acc: float | None


@dataclass(frozen=True)
class Report:
    n: int
    value_acc: float
    equation_acc: float
    by_numbers: list[BucketRow]  # the seven Table-4 rows, in order (empty rows have count 0)


class Tally:
    """Counts of scored problems per Table-4 bucket, added one verdict at a time: a file of any
    size is summarised without keeping its verdicts."""

    def __init__(self) -> None:
        self.counts = {b: [0, 0, 0] for b in NUMBER_BUCKETS}  # problems, value right, equation right

    def add(self, s: Scored) -> None:
        count = self.counts[number_bucket(s.n_numbers)]
        count[0] += 1
        count[1] += s.value_correct
        count[2] += s.equation_correct

    @property
    def n(self) -> int:
        return sum(c[0] for c in self.counts.values())

    @property
    def value_right(self) -> int:
        return sum(c[1] for c in self.counts.values())

    def report(self) -> Report:
        """Accuracies over all problems and per bucket; none scored raises (nothing to report)."""
        n = self.n
        if not n:
            raise ValueError("no problems to evaluate")
        rows = [BucketRow(bucket=b, count=k, proportion=k / n, value_acc=value / k if k else None,
                          equation_acc=equation / k if k else None)
                for b, (k, value, equation) in self.counts.items()]
        return Report(n=n, value_acc=self.value_right / n,
                      equation_acc=sum(c[2] for c in self.counts.values()) / n, by_numbers=rows)


def summarise(scored: Sequence[Scored]) -> Report:
    """Accuracies over all problems and per Table-4 bucket; an empty split raises (nothing to report)."""
    tally = Tally()
    for s in scored:
        tally.add(s)
    return tally.report()


@torch.no_grad()
def tree_loss_sum(solver, rows: Sequence[Mapping[str, Any]], vocab, *, variant: str, batch_size: int,
                  device: torch.device | str = "cpu") -> tuple[float, int]:
    """The teacher-forced tree loss in eval mode, summed over problems (each batch's per-token
    mean weighted by its problems, as training reports it), and the number of problems: rows
    without a gold equation the decoder can be trained towards are left out."""
    was_training = solver.training
    solver.eval()
    kept = [r for r in rows if trainable(r, vocab)]
    total = 0.0
    try:
        for start in range(0, len(kept), batch_size):
            chunk = kept[start:start + batch_size]
            batch = solver.plan(collate(chunk, vocab, variant=variant)).to(device)
            total += float(solver(batch)["tree_loss"]) * len(chunk)
    finally:
        solver.train(was_training)
    return total, len(kept)


def evaluate(solver, rows: Sequence[Mapping[str, Any]], vocab, *, variant: str, beam_size: int,
             batch_size: int, device: torch.device | str = "cpu", bf16_inference: bool | None = None,
             progress=None) -> tuple[Report, list[Scored]]:
    """Predict and score every row: the one evaluation used for validation, test and benchmarks
    (``bf16_inference``, ``progress``: as in ``hlgt.inference.predict``)."""
    predictions = predict(solver, rows, vocab, variant=variant, beam_size=beam_size, batch_size=batch_size,
                          device=device, bf16_inference=bf16_inference, progress=progress)
    return score_predictions(rows, predictions)


def evaluate_chunks(solver, chunks: Iterable[Sequence[Mapping[str, Any]]], *, variant: str, beam_size: int,
                    batch_size: int, device: str = "cpu", bf16_inference: bool = False, sink: IO | None = None,
                    progress=None, keep_wrong: int = 0) -> tuple[Tally, list[tuple[Mapping[str, Any], Scored]]]:
    """Rows decoded and scored a chunk at a time (a file of any size in bounded memory): the tally,
    each prediction line written to ``sink`` as it comes, and the first ``keep_wrong`` wrongly
    solved rows with their scores (for their pages)."""
    tally, wrong = Tally(), []
    for rows in chunks:
        report = (lambda done, base=tally.n: progress.update(base + done)) if progress else None
        predictions = predict(solver, rows, solver.vocab, variant=variant, beam_size=beam_size, batch_size=batch_size,
                              device=device, bf16_inference=bf16_inference, progress=report)
        for row, prediction in zip(rows, predictions):
            scored = score(row, prediction)
            tally.add(scored)
            if sink is not None:
                sink.write(prediction_line(scored))
            if not scored.value_correct and len(wrong) < keep_wrong:
                wrong.append((row, scored))
    if progress is not None:
        progress.end()
    return tally, wrong


def score_predictions(rows: Sequence[Mapping[str, Any]],
                      predictions: Sequence[Sequence[str]]) -> tuple[Report, list[Scored]]:
    """Score predictions made elsewhere (e.g. gathered from several workers), in row order."""
    if len(predictions) != len(rows):
        raise ValueError(f"{len(predictions)} predictions for {len(rows)} rows")
    scored = [score(row, p) for row, p in zip(rows, predictions)]
    return summarise(scored), scored


def _percent(fraction: float | None) -> str:
    return "–" if fraction is None else f"{M.percent(fraction)}%"


def table4_markdown(report: Report, title: str = "", not_scored: int = 0) -> str:
    """The Table-4 breakdown as a Markdown table, over the scored problems (``not_scored``: the
    records of a file that were not, said under it)."""
    lines = [f"### {title}", ""] if title else []
    lines += ["| numbers | problems | proportion | value acc | equation acc |", "|---|---:|---:|---:|---:|"]
    for r in report.by_numbers:
        lines.append(f"| {r.bucket} | {r.count} | {M.percent(r.proportion)}% | {_percent(r.value_acc)} "
                     f"| {_percent(r.equation_acc)} |")
    lines.append(f"| all | {report.n} | 100.0% | {_percent(report.value_acc)} | {_percent(report.equation_acc)} |")
    if not_scored:
        lines.append(f"\nOver the {report.n} problems scored; records not scored, not in this table: {not_scored}.")
    return "\n".join(lines) + "\n"


def table4_csv(report: Report) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["numbers", "problems", "proportion", "value_acc", "equation_acc"])
    for r in report.by_numbers:  # an empty bucket's accuracies: empty cells
        w.writerow([r.bucket, r.count, f"{r.proportion:.6f}",
                    *("" if acc is None else f"{acc:.6f}" for acc in (r.value_acc, r.equation_acc))])
    w.writerow(["all", report.n, "1.000000", f"{report.value_acc:.6f}", f"{report.equation_acc:.6f}"])
    return buf.getvalue()


def prediction_line(s: Scored) -> str:
    """One problem of a predictions file: id, text, predicted and gold infix, values, correct or not, ..."""
    return json.dumps(asdict(s), ensure_ascii=False) + "\n"


def write_predictions(path: str | Path, scored: Sequence[Scored]) -> Path:
    """One JSON object per line (``prediction_line``), the file replaced whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as f:
        for s in scored:
            f.write(prediction_line(s))
    return path


def read_predictions(path: str | Path) -> list[dict]:
    """The records of a predictions file (``write_predictions``), in order; a line that is not a
    JSON object is an error naming the file and the line."""
    records = []
    with Path(path).open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{path}, line {number}: not JSON ({e})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}, line {number}: not a JSON object")
            records.append(record)
    return records


def write_report(directory: str | Path, split: str, report: Report, scored: Sequence[Scored]) -> dict[str, Path]:
    """``predictions_<split>.jsonl``, ``numbers_<split>.md`` and ``.csv`` in ``directory``."""
    directory = Path(directory)
    return {"predictions": write_predictions(directory / f"predictions_{split}.jsonl", scored),
            **write_tables(directory, split, report)}


def write_tables(directory: Path, split: str, report: Report, not_scored: int = 0) -> dict[str, Path]:
    """``numbers_<split>.md`` and ``.csv`` in ``directory``, each replaced whole."""
    directory.mkdir(parents=True, exist_ok=True)
    title = f"{split}: accuracy by number of numbers"
    md = table4_markdown(report, title=title, not_scored=not_scored)
    return {"table_md": write_text(directory / f"numbers_{split}.md", md),
            "table_csv": write_text(directory / f"numbers_{split}.csv", table4_csv(report))}


def check_out_folder(out: str) -> Path:
    """``--out`` as a folder that can be written, checked before anything is evaluated: an
    existing writable folder, or one that can be made in a writable folder, and neither a folder
    another command made (a run's checkpoint among them: a run's predictions replaced by another
    model's would pass for the run's) nor one inside such a folder."""
    path = Path(out).resolve()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise NotADirectoryError(f"--out {out}: {existing} is a file, not a folder")
    for folder in (p for p in (path, *path.parents) if p.is_dir()):  # nor a folder inside one
        kind = "run" if holds_run(folder) else folder_kind(str(folder))
        if kind is not None:
            inside = "" if folder == path else f" is inside {folder}, which"
            raise ValueError(f"--out {out}{inside} is a {kind} folder: its files are that {kind}'s, give "
                             "another folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"--out {out}: the folder {existing} is not writable")
    return path


def explain_wrong(pages: PageFolder, model_dir, solver, flat: dict, wrong: Sequence[tuple[Mapping[str, Any], Scored]],
                  report: Report, beam_size: int, device, bf16_inference: bool = False) -> Path:
    """The pages of wrongly solved problems (``wrong``: rows and verdicts) into ``pages``, and their
    index with Table 4 (``report``) as a chart; the index's path."""
    variant, about = flat["data.graph"], explain.about_model(model_dir, flat)
    entries = []
    for row, s in wrong:
        decoded = explain.decode(solver, row, variant, beam_size, device, bf16_inference)
        html = explain.page(row, variant, decoded=decoded, about=about, **explain.reads(flat))
        gold, predicted = f"{s.gold} ({format_answer(s.answer)})", f"{s.predicted} ({format_answer(s.predicted_value)})"
        entries.append((pages.add(s.id, html), [s.id, s.text[:120], gold, predicted]))
    bars = [(r.bucket, r.value_acc or 0.0, f"{M.percent(r.value_acc, digits=0)}% of {r.count}" if r.count else "none")
            for r in report.by_numbers]
    chart = bar_chart(bars, f"value accuracy by number of quantities (Table 4), all {report.n} problems scored: "
                            f"{M.percent(report.value_acc)}%")
    return pages.index(explain.index_page(
        f"{len(entries)} wrongly solved problems", ["id", "text", "gold (answer)", "model (answer)"], entries,
        about=about, chart=chart, note=f"The first {len(entries)} problems solved wrongly, in file order."))


def by_reason(counts: Mapping[str, int]) -> str:
    """``"missing_field 1, not_an_object 2"``: counts by reason, in reason order."""
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def file_summary(tally: Tally, counts: FileCounts) -> str:
    """What became of every record of a ``--data`` file, and the accuracy over all of them; then
    the first notes about single records, each naming its file and line."""
    not_scored = counts.not_scored
    lost = sum(not_scored.values())
    total = tally.n + lost
    reasons = by_reason(not_scored) or "none"
    gold = by_reason(counts.unanswerable) or "none"
    lines = [f"[evaluate] {counts.read.records} records: {tally.n} scored, {lost} not scored ({reasons}); "
             f"without a gold equation the model can write: {gold}. Value accuracy over all "
             f"{total} problems (not scored = wrong): {M.percent(tally.value_right / max(total, 1))}%"]
    return "\n".join(lines + [f"[evaluate] {note}" for note in counts.read.notes])


if __name__ == "__main__":  # python -m hlgt.train.evaluate: the command hlgt-evaluate
    from hlgt.commands.evaluate import run

    run()
