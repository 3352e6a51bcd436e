"""Splits: which file (and which problems of it) make a dataset's train / valid / test.

* ``math23k``: the common 21,162 / 1,000 / 1,000 files ``math23k/Math_23K_{train,val,test}.json``.
* ``ape210k``: ``ape210k/{train,valid,test}.ape.json`` (only ``valid`` is in ../shared here; a
  missing file is a clear error naming it).
* ``mawps``: five-fold cross-validation over ``mawps/MAWPS.json``. The folds are fixed, and their
  ids are committed in ``datasets/splits/`` so that every run and every reader of the results uses
  the same folds. For fold k: test = fold k; valid = a seeded 10% of the other four folds (whole
  texts, chosen without looking at fold k, and also written out); train = the rest. Two schemes
  (``data.mawps_folds``):

  - ``grouped`` (default, ``mawps_folds.json``): seeded folds in which problems with the same
    text (MAWPS repeats 213 texts, 433 problems) always share a fold, so no test text is trained
    on under another id.
  - ``graph2tree`` (``mawps_folds_graph2tree.json``): Graph2Tree's ``cross_valid_mawps.py`` cut
    applied to all 2,373 problems: the file in order, four chunks of int(0.2 n) problems and the
    rest. 58-75 test problems per fold have their text in the training folds.
  - ``graph2tree-1921`` (``mawps_folds_graph2tree-1921.json``): the folds behind the published
    MAWPS numbers, as Graph2Tree's code makes them: its loader first keeps only the 1,921 problems
    whose one equation is already solved for the unknown (``x=...``; the list and its source:
    ``mawps_graph2tree_kept.json``), then cuts those in file order as above. The other 452
    problems (MAWPS.json holds them rewritten as ``x=...``; ``4+5x=29`` is one) are in no fold:
    they neither train nor test, counted as ``outside_the_folds`` in the training split's skips.
  The two Graph2Tree schemes are for comparing with published numbers, not for judging a model.

  ``data.mawps_valid=false`` gives fold k's validation problems back to train, as the literature
  trains (Graph2Tree's ``cross_valid_mawps.py`` trains on all four other folds): no held-out data
  then, so training keeps its last epoch.

  Regenerate (only if MAWPS.json changes): ``python -m hlgt.data.splits --write-mawps-folds``.
* ``sample``: the project's own problems, ``datasets/sample/{zh,en}_{train,valid,test}.json``
  (``sample_zh`` / ``sample_en`` give one language). It never reads ``data_dir``.

Real files live in ``data_dir``: the ``--data-dir`` option, else ``$HLGT_DATA_DIR``, else
``../shared/datasets`` (``hlgt.config.default_data_dir``).
"""
from __future__ import annotations

import collections
import json
import random
from pathlib import Path

from hlgt.config import MAWPS_FOLD_SCHEMES, MAWPS_N_FOLDS, default_data_dir
from hlgt.data.problems import Problem, ReadResult, iter_problems, read_problems

DATASETS = ("math23k", "mawps", "ape210k", "sample")
SAMPLE_LANGS = {"sample": ("zh", "en"), "sample_zh": ("zh",), "sample_en": ("en",)}
SPLITS = ("train", "valid", "test")
LANGS = {"math23k": "zh", "ape210k": "zh", "mawps": "en"}
FILES = {
    "math23k": {
        "train": "math23k/Math_23K_train.json",
        "valid": "math23k/Math_23K_val.json",
        "test": "math23k/Math_23K_test.json",
    },
    "ape210k": {
        "train": "ape210k/train.ape.json",
        "valid": "ape210k/valid.ape.json",
        "test": "ape210k/test.ape.json",
    },
    "mawps": {split: "mawps/MAWPS.json" for split in SPLITS},
}
REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_DIR = REPO_ROOT / "datasets" / "sample"
MAWPS_FOLDS_FILE = REPO_ROOT / "datasets" / "splits" / "mawps_folds.json"
MAWPS_FOLD_FILES = {"grouped": MAWPS_FOLDS_FILE,
                    **{scheme: REPO_ROOT / "datasets" / "splits" / f"mawps_folds_{scheme}.json"
                       for scheme in ("graph2tree", "graph2tree-1921")}}
MAWPS_GRAPH2TREE_KEPT = REPO_ROOT / "datasets" / "splits" / "mawps_graph2tree_kept.json"
OUTSIDE_THE_FOLDS = "outside_the_folds"
assert tuple(MAWPS_FOLD_FILES) == MAWPS_FOLD_SCHEMES
MAWPS_SEED = 1
MAWPS_VALID_FRACTION = 0.1


def _check(dataset: str, split: str, fold: int, mawps_folds: str = "grouped") -> None:
    if mawps_folds not in MAWPS_FOLD_FILES:
        raise ValueError(f"unknown MAWPS fold scheme {mawps_folds!r}; choose from {list(MAWPS_FOLD_FILES)}")
    if dataset not in DATASETS and dataset not in SAMPLE_LANGS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {list(DATASETS) + ['sample_zh', 'sample_en']}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {list(SPLITS)}")
    if dataset == "mawps" and not 0 <= fold < MAWPS_N_FOLDS:
        raise ValueError(f"MAWPS fold must be in 0..{MAWPS_N_FOLDS - 1}, got {fold}")


def resolve_data_dir(data_dir: str | Path | None) -> Path:
    """The folder holding the real datasets; a relative path is tried from the working directory,
    then from the repository root (so ``../shared/datasets`` works from either)."""
    path = Path(data_dir if data_dir is not None else default_data_dir())
    if not path.is_absolute() and not path.exists() and (REPO_ROOT / path).exists():
        path = REPO_ROOT / path
    return path


def split_paths(dataset: str, split: str, data_dir: str | Path | None = None) -> list[Path]:
    """The file(s) a split is read from (MAWPS: the one file all folds come from)."""
    _check(dataset, split, 0)
    if dataset in SAMPLE_LANGS:
        return [SAMPLE_DIR / f"{lang}_{split}.json" for lang in SAMPLE_LANGS[dataset]]
    return [resolve_data_dir(data_dir) / FILES[dataset][split]]


def require_file(path: Path, dataset: str, split: str) -> None:
    if path.is_file():
        return
    if path.parent.is_relative_to(SAMPLE_DIR):
        raise FileNotFoundError(f"{dataset} {split} file {path} is missing from the repository")
    raise FileNotFoundError(
        f"{dataset} {split} file not found: {path}. Point --data-dir (or the HLGT_DATA_DIR "
        f"environment variable) at the folder that holds {FILES[dataset][split]}."
    )


def read_split(dataset: str, split: str, data_dir: str | Path | None = None, fold: int = 0,
               mawps_folds: str = "grouped", mawps_valid: bool = True) -> ReadResult:
    """Problems of one split and the reader's skip counts (MAWPS: records the reader skipped have
    no usable id, hence no fold, and problems the scheme leaves out of every fold; both are counted
    with the training split; ``mawps_valid=False``: validation is empty and its problems train)."""
    _check(dataset, split, fold, mawps_folds)
    paths = split_paths(dataset, split, data_dir)
    for path in paths:
        require_file(path, dataset, split)
    if dataset in SAMPLE_LANGS:
        result = ReadResult(problems=[])
        for path, lang in zip(paths, SAMPLE_LANGS[dataset]):
            part = read_problems(path, lang=lang)
            result.problems += part.problems
            result.skipped += part.skipped
            result.records += part.records
            result.notes += part.notes
        return result
    whole = read_problems(paths[0], lang=LANGS[dataset])
    if dataset != "mawps":
        return whole
    # A skipped record keeps its fold: the fold file is checked against every id the file holds.
    file_ids = [p.id for p in whole.problems] + whole.skipped_ids
    try:
        by_split = mawps_fold_ids(fold, file_ids, MAWPS_FOLD_FILES[mawps_folds], mawps_valid)
    except ValueError as error:
        if not whole.skipped:
            raise
        # Records whose id cannot be read: the fold file stands, the file is what to mend.
        raise ValueError(f"{paths[0]}: {sum(whole.skipped.values())} record(s) cannot be read (the first: "
                         f"{whole.notes[0]}), and the fold file names ids no readable record holds ({error}): "
                         "mend the records, not the folds") from error
    ids = set(by_split[split])
    problems = [p for p in whole.problems if p.id in ids]
    skipped, notes = collections.Counter(), []
    if split == "train":
        skipped = whole.skipped + collections.Counter({OUTSIDE_THE_FOLDS: len(by_split["outside"])})
        notes = whole.notes
    return ReadResult(problems=problems, skipped=skipped, records=len(problems) + sum(skipped.values()), notes=notes)


def find_problem(dataset: str, problem_id: str, data_dir: str | Path | None = None,
                 splits: tuple[str, ...] = SPLITS) -> tuple[Problem, str]:
    """The problem of ``dataset`` with this id, read from its raw file, and the split whose file
    holds it (MAWPS: its one file, whatever the fold). ``KeyError`` when no file of ``splits``
    holds it; a file of theirs that is missing is an error naming it."""
    read: set[Path] = set()
    for split in splits:
        _check(dataset, split, 0)
        langs = SAMPLE_LANGS.get(dataset, (LANGS.get(dataset),))
        for path, lang in zip(split_paths(dataset, split, data_dir), langs):
            if path in read:
                continue
            read.add(path)
            require_file(path, dataset, split)
            for problem in iter_problems(path, ReadResult(problems=[]), lang):  # a large file is never held whole
                if problem.id == problem_id:
                    return problem, split
    raise KeyError(f"no problem with id {problem_id!r} in the {dataset} files of {', '.join(splits)}")


def load_split(dataset: str, split: str, data_dir: str | Path | None = None, fold: int = 0) -> list[Problem]:
    """The problems of one split, in file order."""
    return read_split(dataset, split, data_dir, fold).problems


# ---------------------------------------------------------------------------------------------
# MAWPS folds.


def make_mawps_folds(problems: list[Problem], n_folds: int = MAWPS_N_FOLDS, seed: int = MAWPS_SEED,
                     valid_fraction: float = MAWPS_VALID_FRACTION, scheme: str = "grouped") -> dict:
    """Folds of one scheme and, per fold, a seeded validation slice of the other folds.

    MAWPS repeats problems (213 texts occur 2-4 times, 433 problems in all): problems with the
    same text (case-folded) form one group. ``grouped``: a group never straddles two folds; groups
    are shuffled with ``seed`` and each goes to the fold with the fewest problems so far.
    ``graph2tree``: fold k is the k-th chunk of int(n / n_folds) problems in file order, the last
    fold takes the rest, whatever the texts. In both, valid takes whole groups of the training
    folds, so valid and train never share a text.
    """
    if scheme not in MAWPS_FOLD_FILES:
        raise ValueError(f"unknown MAWPS fold scheme {scheme!r}; choose from {list(MAWPS_FOLD_FILES)}")
    ids = [p.id for p in problems]
    if len(set(ids)) != len(ids):
        raise ValueError("MAWPS ids are not unique; folds need unique ids")
    outside: list[str] = []
    if scheme == "graph2tree-1921":
        kept = set(graph2tree_kept_ids())
        if not kept <= set(ids):
            raise ValueError(f"{MAWPS_GRAPH2TREE_KEPT}: {len(kept - set(ids))} kept ids are not in MAWPS.json")
        outside = [i for i in ids if i not in kept]
        ids = [i for i in ids if i in kept]
    file_order = {i: n for n, i in enumerate(ids)}
    text = {p.id: text_key(p) for p in problems}
    folds = _folds(ids, text, n_folds, seed, scheme)
    valid = [sorted(_valid_slice(folds, k, text, seed, valid_fraction), key=file_order.get) for k in range(n_folds)]
    spec = {
        "dataset": "mawps",
        "scheme": scheme,
        "source": FILES["mawps"]["train"],
        "problems": len(ids),
        "n_folds": n_folds,
        "seed": seed,
        "valid_fraction": valid_fraction,
        "rule": "fold k: test = folds[k]; valid = valid[k] (drawn from the other folds); train = the rest. "
                + ("Problems with the same text share a fold (and the same side of valid/train)." if scheme == "grouped"
                   else "Folds are file-order chunks (Graph2Tree's cross_valid_mawps.py); a test text may also be "
                        "in train. Valid and train share no text.")
                + (f" Only the problems of {MAWPS_GRAPH2TREE_KEPT.name} are cut into folds; the others (outside) "
                   "neither train nor test." if outside else ""),
        "folds": [sorted(f, key=file_order.get) for f in folds],
        "valid": valid,
    }
    if outside:
        spec["outside"] = outside
    return spec


def _folds(ids: list[str], text: dict[str, str], n_folds: int, seed: int, scheme: str) -> list[list[str]]:
    """The problems of each fold, cut by ``scheme`` (``make_mawps_folds``)."""
    if scheme != "grouped":
        size = int(len(ids) / n_folds)
        return [ids[k * size:(k + 1) * size] for k in range(n_folds - 1)] + [ids[(n_folds - 1) * size:]]
    groups = _text_groups(ids, text)
    random.Random(seed).shuffle(groups)
    folds: list[list[str]] = [[] for _ in range(n_folds)]
    for group in groups:
        min(folds, key=len).extend(group)  # the first of the smallest folds
    return folds


def _valid_slice(folds: list[list[str]], k: int, text: dict[str, str], seed: int, valid_fraction: float) -> list[str]:
    """Fold k's validation ids: seeded whole text groups of the other folds (a text in two of them
    is one group) until about ``valid_fraction`` of their problems. Never looks at fold k."""
    rest = _text_groups([i for j, fold in enumerate(folds) if j != k for i in fold], text)
    random.Random(seed * 1000 + k).shuffle(rest)
    target, chosen = round(valid_fraction * sum(map(len, rest))), []
    for group in rest:
        if len(chosen) >= target:
            break
        chosen += group
    return chosen


def graph2tree_kept_ids() -> list[str]:
    """The MAWPS ids that Graph2Tree's loader keeps (``mawps_graph2tree_kept.json``)."""
    return [str(i) for i in json.loads(MAWPS_GRAPH2TREE_KEPT.read_text(encoding="utf-8"))["kept"]]


def text_key(problem: Problem) -> str:
    """What makes two MAWPS problems "the same text": their tokens, case-folded."""
    return " ".join(problem.tokens).casefold()


def _text_groups(ids: list[str], text: dict[str, str]) -> list[list[str]]:
    """Ids grouped by their text, groups in order of first appearance."""
    groups: dict[str, list[str]] = {}
    for i in ids:
        groups.setdefault(text[i], []).append(i)
    return list(groups.values())


def mawps_fold_ids(
    fold: int, file_ids: list[str] | None = None, path: Path = MAWPS_FOLDS_FILE, valid: bool = True
) -> dict[str, list[str]]:
    """Ids of train / valid / test for one fold, from the committed fold file (``valid=False``:
    no validation ids, train is every other fold whole), and those of the file in no fold
    (``outside``). With ``file_ids`` (the ids read from MAWPS.json), checks the fold file covers
    exactly those ids."""
    if not path.is_file():
        raise FileNotFoundError(f"MAWPS fold file {path} is missing; write it with "
                                f"`python -m hlgt.data.splits --write-mawps-folds --data-dir DIR`")
    spec = json.loads(path.read_text(encoding="utf-8"))
    folds = spec["folds"]
    if not 0 <= fold < len(folds):
        raise ValueError(f"MAWPS fold must be in 0..{len(folds) - 1}, got {fold}")
    outside = spec.get("outside", [])
    if file_ids is not None:
        in_folds = {i for f in folds for i in f} | set(outside)
        missing, extra = set(file_ids) - in_folds, in_folds - set(file_ids)
        if missing or extra:
            first = ", ".join(repr(i) for i in [*sorted(missing)[:3], *sorted(extra)[:3]])
            raise ValueError(
                f"{path} does not match MAWPS.json ({len(missing)} ids of the file in no fold, "
                f"{len(extra)} fold ids not in the file, first {first}); regenerate it with "
                f"`python -m hlgt.data.splits --write-mawps-folds`"
            )
    test = folds[fold]
    valid_ids = spec["valid"][fold] if valid else []
    held = set(test) | set(valid_ids)
    train = [i for j, f in enumerate(folds) if j != fold for i in f if i not in held]
    return {"train": train, "valid": list(valid_ids), "test": list(test), "outside": list(outside)}


def folds_json(spec: dict) -> str:
    """The fold file with one line per field and per id list (readable diffs, small file)."""
    lines = [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in spec.items() if k not in ("folds", "valid")]
    for key in ("folds", "valid"):
        rows = ",\n".join(f"    {json.dumps(ids)}" for ids in spec[key])
        lines.append(f"  {json.dumps(key)}: [\n{rows}\n  ],")
    return "{\n" + "\n".join(lines)[:-1] + "\n}\n"


if __name__ == "__main__":  # python -m hlgt.data.splits: the command hlgt-splits
    from hlgt.commands.splits import run

    run()
