"""The paper's Tables 2, 3 and 4 from a sweep's test predictions, laid out as the paper prints them.

Each arm's chosen models are tested once per replicate (fold and seed). Here their verdicts are
pooled: an arm's accuracy is its right answers over all its test problems (MAWPS's five folds of
the published protocol: its 1,921 problems), beside the paper's figure for the dataset. Each arm is
paired with ``full`` problem by problem on the replicates both ran (``hlgt.train.compare``): the
problems only one of the two solves and the exact McNemar p say whether a difference is more than
the luck of a few problems (by problem where replicates share test problems: seeds on one split).
Under a table of three arms or more, Cochran's Q says whether its arms differ at all (its p by
permutation by problem where replicates share test problems). Where an arm was trained with more
than one seed, it is paired with itself across seeds on the same folds: how far training noise
alone moves an arm, the yardstick for its differences to ``full``. Table 4 is value accuracy by the
number of quantities in the problem, pooled over the replicates every arm tested.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from hlgt import metrics as M
from hlgt.train.compare import PERMUTATIONS, Paired, cochran_q, cochran_q_by_problem, p_text, pair
from hlgt.train.evaluate import NUMBER_BUCKETS, Scored, number_bucket

REFERENCE = "full"
# The paper's rows: each arm's name there, and its value accuracy (%) per dataset (Tables 1-3).
PAPER_ROWS = {
    "parse_graph": "Parse graph + NC",
    "quantity_cell": "Quantity cell + NC",
    "full": "HLGT (SRL + NC + line graph)",
    "no_node_type": "HLGT w/o node type",
    "no_line_graph": "HLGT w/o line graph",
    "no_aux_task": "HLGT w/o auxiliary task",
    "rgat": "RGAT",
    "hgt": "HGT",
    "gts": "GTS",
}
PAPER = {
    "math23k": {"parse_graph": 76.5, "quantity_cell": 77.4, "full": 79.0, "no_node_type": 78.2, "no_line_graph": 77.8,
                "no_aux_task": 78.5, "rgat": 77.0, "hgt": 77.4, "gts": 75.6},
    "mawps": {"parse_graph": 82.9, "quantity_cell": 83.7, "full": 84.8, "no_node_type": 83.4, "no_line_graph": 83.2,
              "no_aux_task": 84.0, "rgat": 82.9, "hgt": 82.7, "gts": 82.6},
    "ape210k": {"full": 69.8, "gts": 67.7},
}
# Table 4 of the paper: HLGT on Math23K by number of quantities (%).
PAPER_TABLE4 = {"math23k": {"<=1": 84.5, "2": 85.3, "3": 79.2, "4": 67.0, "5": 55.3, "6": 56.2, ">=7": 52.6}}
TABLES = (
    ("Table 2: graph construction", ("parse_graph", "quantity_cell", "full")),
    ("Table 3: components", ("no_node_type", "no_line_graph", "no_aux_task", "rgat", "hgt", "full")),
    ("Baseline (Table 1)", ("gts", "full")),
)


@dataclass
class ArmTest:
    """One arm's test verdicts: replicate index -> its chosen model's scored test problems."""

    arm: str
    by_replicate: dict[int, list[Scored]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return sum(len(s) for s in self.by_replicate.values())

    @property
    def right(self) -> int:
        return sum(s.value_correct for scored in self.by_replicate.values() for s in scored)

    @property
    def accuracy(self) -> float:
        return self.right / self.n if self.n else float("nan")


def common_replicates(tests: Sequence[ArmTest]) -> list[int]:
    """The replicates every one of ``tests`` tested, in order."""
    return sorted(set.intersection(*(set(t.by_replicate) for t in tests))) if tests else []


def versus(a: ArmTest, b: ArmTest) -> Paired | None:
    """``a`` against ``b`` on value accuracy, pooled over the replicates both ran (None without one)."""
    common = common_replicates([a, b])
    pairs = [pair(f"{a.arm} / {b.arm} replicate {r}", verdicts(a.by_replicate[r]), verdicts(b.by_replicate[r]))
             for r in common]
    return sum(pairs[1:], pairs[0]) if pairs else None


def verdicts(scored: Sequence[Scored]) -> dict[str, bool]:
    return {s.id: s.value_correct for s in scored}


def _pct(x: float) -> str:
    return "-" if x != x else M.percent(x)


def table_markdown(title: str, arms: Sequence[str], tests: Mapping[str, ArmTest], dataset: str, total: int) -> str:
    """One of the paper's tables: the rows whose arms the sweep ran, ours pooled (marked where over
    fewer than the ``total`` replicates), the paper's figure, each row's difference to ``full`` (ours
    on the replicates both ran, and the paper's) and the paired counts."""
    paper = PAPER.get(dataset, {})
    ref = tests.get(REFERENCE)
    lines = [f"### {title}", "",
             "| paper's row | arm | ours (%) | right / problems | paper (%) | ours − full | paper − full "
             "| only this arm / only full | exact McNemar p |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    repeats = fewer = False
    for arm in arms:
        t = tests.get(arm)
        if t is None:
            continue
        p = versus(t, ref) if ref is not None and arm != REFERENCE else None
        repeats = repeats or (p is not None and p.repeats)
        ours_diff = M.percent((p.right_a - p.right_b) / p.n, sign=True) if p else ""
        paper_diff = (f"{paper[arm] - paper[REFERENCE]:+.1f}" if arm != REFERENCE and arm in paper
                      and REFERENCE in paper else "")
        counts = f"{p.only_a} / {p.only_b}" if p else ""
        tested = len(t.by_replicate)
        fewer = fewer or tested < total
        ours = _pct(t.accuracy) + (f" ({tested} of {total})" if tested < total else "")
        lines.append(f"| {PAPER_ROWS.get(arm, arm)} | {arm} | {ours} | {t.right} / {t.n} "
                     f"| {paper.get(arm, '-')} | {ours_diff} | {paper_diff} | {counts} | {p_text(p.p) if p else ''} |")
    if fewer:
        lines.append(f"\n(k of {total}): the arm was tested on k of the {total} replicates, its figure pooled over "
                     "those alone; ours − full and the counts set it beside `full` on the replicates both tested.")
    if repeats:
        lines.append("\nReplicates share test problems (seeds on one split): the p takes each problem once, "
                     "the sign-flip test on its net count over the replicates (only this arm less only full).")
    differ = differ_line(arms, tests)
    return "\n".join(lines) + "\n" + (f"\n{differ}\n" if differ else "")


def differ_line(arms: Sequence[str], tests: Mapping[str, ArmTest], which: str = "these") -> str:
    """Whether the arms (three or more) differ at all: Cochran's Q over their verdicts on the
    replicates every one of them tested ("" with fewer arms or no replicate in common)."""
    present = [a for a in arms if a in tests]
    common = common_replicates([tests[a] for a in present])
    if len(present) < 3 or not common:
        return ""
    models = [{(r, s.id): s.value_correct for r in common for s in tests[a].by_replicate[r]} for a in present]
    distinct = len({problem for _, problem in models[0]})
    if distinct < len(models[0]):
        q, _, p = cochran_q_by_problem(models)
        # No draw at least Q: p's estimate is its floor, 1 / (draws + 1); say the bound instead (the
        # rule of three: p < 3 / draws at 95%).
        bound = f"no draw reached Q: p < {3 / PERMUTATIONS:.1g}" if p == 1 / (PERMUTATIONS + 1) else f"p = {p:.2g}"
        how = (f" ({distinct} distinct: the p by permutation by problem, {PERMUTATIONS:,} draws, each shuffling "
               "the arms alike in all of a problem's replicates)")
        figures = f"Q = {q:.1f}, {bound}"
    else:
        q, df, p = cochran_q(models)
        how, figures = "", f"Q = {q:.1f}, df = {df}, p = {p_text(p)}"
    return (f"Do {which} {len(present)} arms differ at all? Cochran's Q on the {len(models[0])} problems of the "
            f"replicates all of them tested{how}: {figures}.")


@dataclass(frozen=True)
class SeedPair:
    """One arm trained with two seeds, paired on the folds both runs tested (``None`` without folds)."""

    arm: str
    seeds: tuple[int, int]
    folds: list[int | None]
    paired: Paired  # a: the first seed, b: the second

    @property
    def folds_text(self) -> str:
        return ", ".join("-" if f is None else str(f) for f in self.folds)


def seed_pairs(tests: Mapping[str, ArmTest], replicates: Sequence[Mapping]) -> list[SeedPair]:
    """Every arm against itself with another seed: for each two of its seeds, its verdicts pooled
    over the folds that both seeds' runs tested (``replicates[r]``: replicate r's data.fold and
    train.seed)."""
    out = []
    for arm, t in tests.items():
        by_seed: dict[int, ArmTest] = {}  # seed -> the arm's verdicts by fold
        for r, scored in t.by_replicate.items():
            seed = replicates[r].get("train.seed")
            by_seed.setdefault(seed, ArmTest(arm)).by_replicate[replicates[r].get("data.fold")] = scored
        for a, b in combinations(sorted(by_seed), 2):
            paired = versus(by_seed[a], by_seed[b])
            if paired is not None and paired.n:
                out.append(SeedPair(arm, (a, b), common_replicates([by_seed[a], by_seed[b]]), paired))
    return out


def seed_noise_markdown(tests: Mapping[str, ArmTest], replicates: Sequence[Mapping]) -> str:
    """The arms trained with two seeds or more, each against itself ("" where none was)."""
    rows = seed_pairs(tests, replicates)
    if not rows:
        return ""
    lines = ["### Training noise: each arm against itself with another seed", "",
             "The same arm, settings and test problems; only the training seed differs. An arm's difference to "
             "`full` says more than training noise only where it is well beyond these.", "",
             "| arm | seeds | folds | first seed (%) | second seed (%) | second − first | only the first / only the "
             "second | exact McNemar p |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        p = row.paired
        lines.append(f"| {row.arm} | {row.seeds[0]} / {row.seeds[1]} | {row.folds_text} | {_pct(p.right_a / p.n)} "
                     f"| {_pct(p.right_b / p.n)} | {M.percent((p.right_b - p.right_a) / p.n, sign=True)} "
                     f"| {p.only_a} / {p.only_b} | {p_text(p.p)} |")
    return "\n".join(lines) + "\n"


def table4_markdown(tests: Mapping[str, ArmTest], dataset: str) -> str:
    """Table 4: value accuracy by number of quantities, one column per arm, pooled over the replicates
    every arm tested, so that each column counts the same problems (an arm still running has fewer)."""
    arms = list(tests)
    paper = PAPER_TABLE4.get(dataset)
    common = common_replicates(list(tests.values()))
    problems = {arm: [s for r in common for s in tests[arm].by_replicate[r]] for arm in arms}
    total = len(problems[arms[0]]) if arms else 0
    every = all(set(t.by_replicate) == set(common) for t in tests.values())
    on = "" if every else f" on replicate(s) {', '.join(map(str, common)) or 'none'}, those every arm tested"
    head = "| numbers | problems | share | " + " | ".join(arms) + (" | paper's HLGT |" if paper else " |")
    lines = [f"### Table 4: value accuracy (%) by number of quantities{on}", "", head,
             "|---|---:|---:|" + "---:|" * (len(arms) + bool(paper))]
    for bucket in NUMBER_BUCKETS:
        count = sum(number_bucket(s.n_numbers) == bucket for s in problems[arms[0]]) if arms else 0
        cells = []
        for arm in arms:
            group = [s for s in problems[arm] if number_bucket(s.n_numbers) == bucket]
            cells.append(_pct(sum(s.value_correct for s in group) / len(group)) if group else "-")
        share = f"{M.percent(count / total)}%" if total else "-"
        lines.append(f"| {bucket} | {count} | {share} | " + " | ".join(cells)
                     + (f" | {paper[bucket]} |" if paper else " |"))
    return "\n".join(lines) + "\n"


def tables_markdown(tests: Mapping[str, ArmTest], dataset: str, pooled_over: str,
                    replicates: Sequence[Mapping] = ()) -> str:
    """Tables 2 and 3 and the baseline (those with an arm of theirs besides ``full`` in the sweep),
    the arms of none of them, each arm against itself with another seed (``replicates``: the
    sweep's folds and seeds, by replicate), then Table 4."""
    if not tests:
        return ""
    total = len(replicates) or max(len(t.by_replicate) for t in tests.values())
    out = [f"## The paper's tables: test value accuracy pooled over {pooled_over}", "",
           "A row's difference to `full` (ours − full) and its paired counts are over the replicates both tested.", ""]
    printed = []  # each printed table's arms that the sweep tested
    for title, arms in TABLES:
        if any(a in tests for a in arms if a != REFERENCE):
            out.append(table_markdown(title, arms, tests, dataset, total))
            printed.append({a for a in arms if a in tests})
    others = [a for a in tests if not any(a in arms for arms in printed)]
    if others:
        out.append(table_markdown("Other arms", others, tests, dataset, total))
        printed.append(set(others))
    # A table holding every arm of the sweep has already printed the sweep's own test.
    whole = len(tests) > 3 and set(tests) not in printed
    differ = differ_line(list(tests), tests, which="the sweep's") if whole else ""
    if differ:
        out.append(differ + "\n")
    noise = seed_noise_markdown(tests, replicates) if replicates else ""
    if noise:
        out.append(noise)
    out.append(table4_markdown(tests, dataset))
    return "\n".join(out)


def table_rows(tests: Mapping[str, ArmTest], dataset: str) -> list[list]:
    """Every arm's pooled figures and paired counts against ``full``, for a W&B table."""
    ref = tests.get(REFERENCE)
    rows = []
    for arm, t in tests.items():
        p = versus(t, ref) if ref is not None and arm != REFERENCE else None
        rows.append([arm, PAPER_ROWS.get(arm, arm), t.accuracy, t.right, t.n, len(t.by_replicate),
                     PAPER.get(dataset, {}).get(arm),
                     p.only_a if p else None, p.only_b if p else None, p.p if p else None])
    return rows


def seed_rows(tests: Mapping[str, ArmTest], replicates: Sequence[Mapping]) -> list[list]:
    """Each arm against itself with another seed, for a W&B table."""
    return [[r.arm, r.seeds[0], r.seeds[1], r.folds_text, r.paired.right_a / r.paired.n,
             r.paired.right_b / r.paired.n, r.paired.n, r.paired.only_a, r.paired.only_b, r.paired.p]
            for r in seed_pairs(tests, replicates)]


# mcnemar_p: the exact McNemar p, by problem where the pooled replicates share test problems
# (``Paired.p``); the seed rows pair folds, whose problems never repeat.
SEED_COLUMNS = ["arm", "seed_a", "seed_b", "folds", "test_value_acc_a", "test_value_acc_b", "problems", "only_a",
                "only_b", "mcnemar_p"]
TABLE_COLUMNS = ["arm", "paper_row", "test_value_acc_pooled", "right", "problems", "replicates", "paper",
                 "only_arm", "only_full", "mcnemar_p"]
