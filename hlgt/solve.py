"""Solve a new problem with a trained model: raw text in, the equation in infix and the answer out.

    python -m hlgt.solve --model runs/sample-full-seed1/best "一根绳子长12米，用去了(1/4)，还剩多少米？"
    python -m hlgt.solve --model runs/mawps-fold0-full-seed1/best "A farmer has 120 apples. He sells 3/4 of them. How many does he sell?"

The path is the training path, applied to one text: tokenise (Chinese: jieba, with every number —
``(1/5)``, ``1(5/6)``, ``20%``, ``3.5``, ``1,200``, ``3:7`` — kept whole; English: words, numbers
and punctuation apart; Chinese numerals before a measure word and 一半 read as numbers) →
``extract_quantities`` (a text without quantities is refused with a message) → the model's configured annotator (or
``--annotator``) → ``build_graph`` → one shard row → ``hlgt.inference.predict`` → prefix → infix
with the text's numbers substituted, evaluated exactly for the answer.

The model folder is a ``best/`` folder written by training (``Solver.save`` plus
``run_config.json``); it is all that is needed. Loading it, decoding and formatting the equation
and answer are ``hlgt.inference``'s; this module owns the text's side: tokenising, quantities,
annotation and the graph of one problem, and the command.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from hlgt.data.clean import MAX_TOKENS, over_limits
from hlgt.data.graph import build_graph
from hlgt.data.numbers import Example, extract_quantities
from hlgt.data.problems import guess_lang
from hlgt.data.schema import to_row
from hlgt.data.srl import make_annotator
from hlgt.data.text import tokenize
from hlgt.expr import ExprError, eval_prefix

# Checked before tokenising: 20 characters per token the model reads is more than any text needs.
MAX_TEXT_CHARS = 20 * MAX_TOKENS


@dataclass(frozen=True)
class Solution:
    lang: str
    tokens: list[str]
    numbers: list[str]  # the quantities N0..Nk as written
    prefix: list[str]  # the model's equation over N0..Nk and constants
    equation: str  # infix, numbers substituted
    answer: float | None
    error: str | None  # why the equation could not be evaluated


def solve_text(model_dir: str | Path, text: str, lang: str | None = None, annotator: str | None = None,
               beam_size: int | None = None) -> Solution:
    """Solve one problem written in ``text`` (language guessed when ``lang`` is None)."""
    # Imported here, not at the top: it brings in torch and the model, which ``--help`` and
    # ``tokenize`` do without.
    from hlgt.inference import infix_with_numbers, load_model, predict

    if not text or not text.strip():
        raise ValueError("empty problem text")
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"the problem text has {len(text)} characters; at most {MAX_TEXT_CHARS} are read")
    lang = lang or guess_lang(text)
    tokens, quantities = extract_quantities(tokenize(text, lang))
    if not quantities:
        raise ValueError("no quantities found in the text: write its numbers in digits (Chinese "
                         "numerals are read before a measure word, as in 三个, and 一半)")
    over = over_limits(tokens, quantities)
    if over is not None:
        raise ValueError(over[1])
    solver, flat = load_model(model_dir)
    name = annotator or flat["data.annotator"]
    annotation = make_annotator(name, flat["data.annotator_model"] if name == flat["data.annotator"] else "").annotate(tokens, lang)
    example = Example(id="input", lang=lang, source="solve", tokens=tokens, quantities=quantities, prefix=None,
                      answer=math.nan)
    row = to_row(example, build_graph(example, annotation))
    prefix = predict(solver, [row], solver.vocab, variant=flat["data.graph"],
                     beam_size=beam_size or int(flat["model.beam_size"]), batch_size=1)[0]
    numbers = [q.text for q in quantities]
    answer, error = None, None
    try:
        answer = eval_prefix(prefix, [q.value for q in quantities])
    except ExprError as e:
        error = str(e)
    return Solution(lang=lang, tokens=tokens, numbers=numbers, prefix=prefix,
                    equation=infix_with_numbers(prefix, numbers), answer=answer, error=error)


def main(argv: list[str] | None = None) -> int:
    # No abbreviations: a misspelt or shortened option is an error, not another option's value.
    p = argparse.ArgumentParser(prog="python -m hlgt.solve", allow_abbrev=False,
                                description="Solve a math word problem with a trained model.")
    p.add_argument("--model", required=True, help="a trained model folder (<run>/best)")
    p.add_argument("--lang", choices=["zh", "en"], default=None, help="default: guessed from the text")
    p.add_argument("--annotator", default=None, help="offline | ltp | hanlp (default: the model's)")
    p.add_argument("--beam-size", type=int, default=None)
    p.add_argument("text", nargs="+", help="the problem text")
    args = p.parse_args(argv)
    from hlgt.inference import format_answer  # after parsing: see solve_text

    s = solve_text(args.model, " ".join(args.text), lang=args.lang, annotator=args.annotator, beam_size=args.beam_size)
    print(f"tokens:   {' '.join(s.tokens)}")
    print(f"numbers:  {', '.join(f'N{i}={n}' for i, n in enumerate(s.numbers)) or 'none'}")
    print(f"equation: x = {s.equation}")
    if s.error is not None:
        print(f"answer:   none (the equation does not evaluate: {s.error})")
        return 2
    print(f"answer:   {format_answer(s.answer)}")
    return 0


if __name__ == "__main__":
    from hlgt.cli import run_command

    sys.exit(run_command(main, "python -m hlgt.solve"))
