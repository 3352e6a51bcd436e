"""hlgt-solve (python -m hlgt.solve): a trained model solves a problem typed on the command line, or a
file of them (``hlgt.solve``), and with ``--explain`` / ``--explain-dir`` draws each as a page
(``hlgt.explain``).

    hlgt-solve --model runs/<run>/best "Jack had 8 pens and gave 3 away. How many are left?"
    hlgt-solve --model runs/<run>/best --file problems.jsonl --out answers.jsonl [--explain-dir DIR]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hlgt.commands.cli import beam_size, run_command
from hlgt.data.problems import MAX_NOTES
from hlgt.data.srl import ANNOTATORS
from hlgt.solve import explain_text, mostly_unknown, solve_file, solve_text

PROG = "hlgt-solve"


def main(argv: list[str] | None = None) -> int:
    # No abbreviations: a misspelt or shortened option is an error, not another option's value.
    p = argparse.ArgumentParser(prog=PROG, allow_abbrev=False,
                                description="Solve a math word problem (or a file of them) with a trained model.")
    p.add_argument("--model", required=True,
                   help="a trained model folder (<run>/best; the last epoch's: <run>/checkpoint/model)")
    p.add_argument("--lang", choices=["zh", "en"], default=None,
                   help="default: the model's dataset's; for the sample data's, guessed from each text")
    p.add_argument("--annotator", default=None, choices=list(ANNOTATORS), help="default: the model's")
    p.add_argument("--beam-size", type=beam_size, default=None, help="default: the model's")
    p.add_argument("--file", default=None,
                   help="JSON Lines of {\"text\": ..., \"id\": ...} to solve (with --out and/or --explain-dir); "
                        "\"original_text\", as the datasets name it, is read as \"text\", and a "
                        "\"segmented_text\" gives the tokens")
    p.add_argument("--out", default=None,
                   help="where --file's answers go (JSON Lines: id, then equation and answer (null where the "
                        "equation does not evaluate), an error, not_read and unknown_words where there are any)")
    p.add_argument("--explain", default=None, metavar="PAGE",
                   help="also write the problem text as the model sees it to this HTML page (hlgt.explain)")
    p.add_argument("--explain-dir", default=None, metavar="DIR",
                   help="with --file: one such page per problem, and index.html, in this folder")
    p.add_argument("text", nargs="*", help="the problem text")
    args = p.parse_args(argv)
    if args.text and (args.file or args.out):
        p.error("--file and --out go together, for a file of problems: give them or a problem text")
    if args.text and args.explain_dir:
        p.error("--explain-dir writes a page per problem of a --file; for a problem text, --explain PAGE")
    if args.file and args.explain:
        p.error("--explain writes the page of one problem text; for a --file, --explain-dir DIR")
    if not args.text and not (args.file and (args.out or args.explain_dir)):
        p.error("give a problem text, or --file FILE with --out FILE (and/or --explain-dir DIR)")
    if args.file:
        notes: list[str] = []
        solved, errors = solve_file(args.model, args.file, args.out, lang=args.lang, annotator=args.annotator,
                                    beam_size=args.beam_size, notes=notes, explain_dir=args.explain_dir)
        where = " and ".join(filter(None, [args.out, args.explain_dir and str(Path(args.explain_dir) / "index.html")]))
        print(f"[solve] {solved} solved, {errors} with an error -> {where}")
        for note in notes[:MAX_NOTES]:
            print(f"[solve] note: {note}")
        if len(notes) > MAX_NOTES:
            print(f"[solve] note: {len(notes) - MAX_NOTES} more repeated ids made unique")
        return 0
    from hlgt.expr import format_answer  # after parsing: see solve_text

    text = " ".join(args.text)
    settings = {"lang": args.lang, "annotator": args.annotator, "beam_size": args.beam_size}
    s = (explain_text(args.model, text, args.explain, **settings) if args.explain
         else solve_text(args.model, text, **settings))
    print(f"tokens:   {' '.join(s.tokens)}")
    print(f"numbers:  {', '.join(f'N{i}={n}' for i, n in enumerate(s.numbers)) or 'none'}")
    if s.not_read:
        print(f"not read: {', '.join(s.not_read)} (digits, but no quantity the model can use)")
    if s.unknown:
        print(f"unknown:  {', '.join(s.unknown)} (words the model never learned: each read as <unk>)")
    if mostly_unknown(s):
        print(f"note:     most of the text's words are unknown to the model: is it written in the model's "
              f"language ({s.lang})? The equation below is a guess from the numbers alone")
    print(f"equation: x = {s.equation}")
    if args.explain:
        print(f"page:     {args.explain}")
    if s.error is not None:
        print(f"answer:   none (the equation does not evaluate: {s.error})")
        return 2
    print(f"answer:   {format_answer(s.answer)}")
    return 0


def run() -> None:
    sys.exit(run_command(main, PROG))
