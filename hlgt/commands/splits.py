"""hlgt-splits (python -m hlgt.data.splits): writes the committed MAWPS fold-id files, every scheme
(``hlgt.data.splits``).
"""
from __future__ import annotations

import argparse
import sys

from hlgt.commands.cli import run_command
from hlgt.data.problems import read_problems
from hlgt.data.splits import FILES, MAWPS_FOLD_FILES, folds_json, make_mawps_folds, require_file, resolve_data_dir
from hlgt.storage import write_text

PROG = "hlgt-splits"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="Write the committed MAWPS fold-id files (every scheme).",
                                     allow_abbrev=False)
    parser.add_argument("--data-dir", default=None, help="folder holding mawps/MAWPS.json "
                        "(default: $HLGT_DATA_DIR or ../shared/datasets)")
    parser.add_argument("--write-mawps-folds", action="store_true",
                        help=f"write {', '.join(str(f) for f in MAWPS_FOLD_FILES.values())}")
    args = parser.parse_args(argv)
    if not args.write_mawps_folds:
        parser.print_help()
        return 2
    path = resolve_data_dir(args.data_dir) / FILES["mawps"]["train"]
    require_file(path, "mawps", "train")
    read = read_problems(path, lang="en")
    if read.skipped:  # folds cut without them would move other problems between folds too
        reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(read.skipped.items()))
        raise ValueError(f"{path}: {sum(read.skipped.values())} record(s) cannot be read ({reasons}; the first: "
                         f"{read.notes[0]}): the folds are cut from every record, so mend the file first")
    problems = read.problems
    for scheme, out in MAWPS_FOLD_FILES.items():
        spec = make_mawps_folds(problems, scheme=scheme)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text(out, folds_json(spec))  # whole: a build may be reading the folds
        print(f"wrote {out}: {spec['problems']} ids in {spec['n_folds']} folds ({scheme})")
    return 0


def run() -> None:
    sys.exit(run_command(main, PROG))
