"""The explain pages: one problem as the model sees it, as one self-contained HTML page.

A page shows the problem's tokens with its quantities marked N0..Nk; the heterogeneous graph of
the model's graph arm (``data.graph``: the edges an arm drops are not drawn), nodes coloured by
their 7 types, edges labelled by theirs, the nodes on no edge set apart; the line graph's size and,
for an edge under the pointer or clicked, its line-graph neighbours (the edges it leads to and
those that lead to it); the decoded expression tree, the beam's final candidates with their
log-probabilities, the equation in infix and its answer, with the gold equation's beside them
where there is one; and, for a model with HLGT layers, each layer's attention from each quantity
node over the nodes it reads (the top few, averaged over the heads).

Everything is inline: the drawings are SVG (``hlgt.draw``), the page's data is JSON in a script
element, and one small script adds the interaction; nothing is fetched, so a page opens from a
file on a machine without a network. The script reports in the page itself: the element
``#script-status`` reads ``ok nodes=N edges=E`` (what it found in the drawing) once it ran, or
``error: ...``.

Pages are made from shard rows (``hlgt.data.schema``), for ``hlgt.solve --explain`` and
``--explain-dir``, ``hlgt.train.evaluate --explain`` and ``hlgt.data.report --explain`` (no
model). A problem the model cannot read still gets a page, from what could be read of it, under
a notice that says why. Where pages may be written, and how, is ``hlgt.pages``'s.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hlgt.config import Config
from hlgt.data.clean import over_limits
from hlgt.data.graph import (
    EDGE_TYPES,
    GRAPH_FIELDS,
    GRAPH_VARIANTS,
    NODE_TYPES,
    NUMERIC_NODE_TYPES,
    Graph,
    GraphError,
    build_graph,
    select_variant,
)
from hlgt.data.numbers import Example, ExampleError, extract_quantities, to_example
from hlgt.data.schema import to_row
from hlgt.data.splits import SPLITS, find_problem, resolve_data_dir
from hlgt.data.srl import AnnotationError, AnnotatorLoadError, make_annotator
from hlgt.draw import EDGE_COLOURS, NODE_COLOURS, Edge, Node, esc, graph_svg, tree_svg
from hlgt.expr import (
    OPS,
    ExprError,
    as_written,
    eval_prefix,
    format_answer,
    infix_with_numbers,
    slot_index,
    values_match,
)
from hlgt.pages import MARKER, check_page_file
from hlgt.storage import write_text

# hlgt.data.collate brings in torch: imported where a model decodes, so that `hlgt-report --explain`
# draws a problem's graph without it.

MAX_DRAWN_EDGES = 3000  # above, the nodes are drawn without their edges
TOP_ATTENTION = 3
CONSTANT_COLOUR = "#b8b8b8"
EMPTY_GRAPH = Graph(**{name: np.zeros(0, dtype=np.int64) for name in GRAPH_FIELDS})


@dataclass(frozen=True)
class Decoded:
    """A model's reading of one problem (``decode``)."""

    candidates: list[tuple[list[str], float]]  # the beam's final ones: prefix and log-probability, best first
    attention: list[np.ndarray] | None  # per HLGT layer [E, M] over the graph arm's edges; None: no HLGT layers


def decode(solver, row: Mapping[str, Any], variant: str, beam_size: int | None = None, device: str = "cpu",
           bf16_inference: bool | None = None) -> Decoded:
    """One row decoded by ``solver`` as ``hlgt.inference.predict`` decodes it (settings as there),
    seen from inside (``Solver.inspect``)."""
    from hlgt.data.collate import collate  # here: it brings in torch, which a page without a model does without

    batch = collate([row], solver.vocab, variant=variant).to(device)
    seen = solver.inspect(batch, beam_size=beam_size, bf16_inference=bf16_inference)
    attention = None if seen.attention is None else [a.float().cpu().numpy() for a in seen.attention]
    return Decoded(candidates=seen.candidates[0], attention=attention)


def _unread(flat: Mapping[str, Any]) -> set[str]:
    """The settings the model of ``flat`` never reads (``Config.unread_keys``: GTS reads no graph)."""
    return Config.from_flat({k: v for k, v in flat.items() if k.startswith("model.")}).unread_keys()


def reads(flat: Mapping[str, Any]) -> dict[str, bool]:
    """What the model of ``flat`` reads of a problem's graph, as ``page`` takes it: the graph at
    all, and its line graph."""
    unread = _unread(flat)
    return {"reads_graph": "data.graph" not in unread,
            "line_graph": bool(flat["model.line_graph"]) and "model.line_graph" not in unread}


def about_model(model_dir: str | os.PathLike, flat: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A page's header lines for a model: its folder, dataset, annotator and arm (a setting its
    model never reads says so)."""
    unread = _unread(flat)

    def setting(key: str, text: str) -> str:
        return f"{text} (not read)" if key in unread else text

    arm = ", ".join([f"encoder {flat['model.encoder']}", setting("data.graph", f"graph {flat['data.graph']}"),
                     setting("model.node_type", f"node types {'on' if flat['model.node_type'] else 'off'}"),
                     setting("model.line_graph", f"line graph {'on' if flat['model.line_graph'] else 'off'}"),
                     f"comparison loss {'on' if flat['model.aux_task'] else 'off'}"])
    return [("model", str(model_dir)), ("dataset", str(flat["data.dataset"])),
            ("annotator", str(flat["data.annotator"])), ("arm", arm)]


def example_row(example: Example, annotator) -> tuple[dict, str | None]:
    """An example as a shard row with its graph, or with none and the reason none could be built."""
    try:
        graph = build_graph(example, annotator.annotate(example.tokens, example.lang))
    except (GraphError, AnnotationError) as error:
        return to_row(example, EMPTY_GRAPH), f"no graph could be built: {error}"
    return to_row(example, graph), None


def data_page(problem, annotator, variant: str, about: Sequence[tuple[str, str]] = ()) -> str:
    """The page of a ``hlgt.data.problems.Problem`` straight from its raw file, without a model:
    its gold equation and the graph ``annotator`` builds, under a note of what the data rules
    (``hlgt.data.numbers``, ``hlgt.data.clean``) say of it."""
    notes = []
    try:
        example = to_example(problem)
        if example.flag is not None:
            notes.append(f"its gold equation cannot be used ({example.flag}): training leaves it out")
    except ExampleError as error:
        tokens, quantities = extract_quantities(problem.tokens)
        example = Example(id=problem.id, lang=problem.lang, source=problem.source, tokens=tokens,
                          quantities=quantities, prefix=None, answer=math.nan)
        notes.append(f"{error}: every split leaves it out")
    over = over_limits(example.tokens, example.quantities)
    if over is not None:
        notes.append(f"{over[1]}: every split leaves it out")
    row, no_graph = example_row(example, annotator) if example.tokens else (to_row(example, EMPTY_GRAPH), None)
    notes += [no_graph] if no_graph else []
    return page(row, variant, notice="; ".join(notes) or None, notice_title="What the data rules say", about=about)


def page(row: Mapping[str, Any], variant: str, *, decoded: Decoded | None = None, notice: str | None = None,
         notice_title: str = "The model cannot read this problem", about: Sequence[tuple[str, str]] = (),
         reads_graph: bool = True, line_graph: bool = True) -> str:
    """The page of one problem (module docstring). ``row``: a shard row, its graph columns empty
    when no graph could be built; ``variant``: the graph arm drawn (``GRAPH_VARIANTS``);
    ``decoded``: the model's reading (None: a page of the data alone); ``notice``: why the model
    cannot read the problem; ``reads_graph``, ``line_graph``: whether the model reads the graph and
    its line graph (``reads``)."""
    if variant not in GRAPH_VARIANTS:
        raise ValueError(f"unknown graph variant {variant!r}; expected one of {sorted(GRAPH_VARIANTS)}")
    graph = select_variant(Graph.from_lists(row), variant) if len(row["node_pos"]) else None
    quantity = quantity_nodes(graph, row["num_pos"]) if graph is not None else []
    names = node_names(graph, row, quantity) if graph is not None else []
    body = [f"<header><h1>Problem {esc(row['id'])}</h1>{_about(about)}</header>"]
    if notice:
        body.append(f'<div class="notice"><b>{esc(notice_title)}:</b> {esc(notice)}</div>')
    body.append(_text_section(row, graph))
    body.append(_answer_section(row, decoded))
    body.append(_graph_section(graph, variant, names, quantity, reads_graph, line_graph))
    if decoded is not None:
        body.append(_attention_section(graph, decoded, names, quantity))
    data = _page_data(graph, names)
    lang = esc(row.get("lang") or "en")
    return (f'<!DOCTYPE html>\n<html lang="{lang}"><head><meta charset="utf-8">{MARKER}'
            f"<title>Problem {esc(row['id'])}</title><style>{CSS}</style></head>\n<body>\n"
            + "\n".join(body)
            + '\n<p id="script-status" data-state="not run">the page\'s script has not run</p>\n'
            + f'<script type="application/json" id="explain-data">{_json(data)}</script>\n'
            + f"<script>{SCRIPT}</script>\n</body></html>\n")


def quantity_nodes(graph: Graph, num_pos: Sequence[int]) -> list[int]:
    """The node of each quantity N0..Nk (quantities sharing a token keep their slot order, as
    ``build_graph`` orders them); -1 for one without a node."""
    numeric = np.isin(graph.node_type, NUMERIC_NODE_TYPES)
    taken: dict[int, int] = {}
    out = []
    for p in num_pos:
        at = np.flatnonzero(numeric & (graph.node_pos == p))
        k = taken.get(p, 0)
        taken[p] = k + 1
        out.append(int(at[k]) if k < len(at) else -1)
    return out


def node_names(graph: Graph, row: Mapping[str, Any], quantity: Sequence[int]) -> list[str]:
    """Each node's name on the page: its token, with its slot (``N0 12``) for a quantity."""
    tokens = list(row["tokens"])
    names = [str(tokens[p]) if 0 <= p < len(tokens) else "?" for p in graph.node_pos.tolist()]
    for i, v in enumerate(quantity):
        if v >= 0:
            names[v] = f"N{i} {names[v]}"
    return names


def _about(about: Sequence[tuple[str, str]]) -> str:
    return "".join(f'<p class="about"><b>{esc(k)}</b> {esc(v)}</p>' for k, v in about)


def _text_section(row: Mapping[str, Any], graph: Graph | None) -> str:
    slot = {p: i for i, p in enumerate(row["num_pos"])}
    node_at: dict[int, int] = {}
    if graph is not None:
        for v, p in enumerate(graph.node_pos.tolist()):
            node_at.setdefault(p, v)
    spans = []
    for t, token in enumerate(row["tokens"]):
        attrs = f' data-n="{node_at[t]}"' if t in node_at else ""
        if t in slot:
            spans.append(f'<span class="tok q"{attrs}>{esc(token)}<sub>N{slot[t]}</sub></span>')
        else:
            spans.append(f'<span class="tok"{attrs}>{esc(token)}</span>')
    count = f"{len(row['tokens'])} tokens, {len(row['num_pos'])} quantities"
    return (f'<section id="text"><h2>Text</h2><p class="note">{count}</p>'
            f'<p class="tokens">{" ".join(spans)}</p></section>')


def _answer_section(row: Mapping[str, Any], decoded: Decoded | None) -> str:
    numbers = [str(t) for t in row["num_texts"]]
    values = [float(v) for v in row["num_values"]]
    gold = None if row.get("prefix") is None else [str(t) for t in row["prefix"]]
    lines, trees = [], []
    if decoded is not None:
        best = decoded.candidates[0][0] if decoded.candidates else []
        value, verdict = _value(best, values), ""
        if gold is not None or math.isfinite(float(row["answer"])):
            right = value is not None and values_match(value, float(row["answer"]))
            verdict = ' <b class="right">right</b>' if right else ' <b class="wrong">wrong</b>'
        lines.append(f"<p><b>model</b> x = {esc(infix_with_numbers(best, numbers) or 'none found')}"
                     f" &nbsp; answer {esc(format_answer(value))}{verdict}</p>")
        trees.append(("model's equation", best))
    if gold is not None or math.isfinite(float(row["answer"])):
        gold_text = (f"x = {infix_with_numbers(gold, numbers)}" if gold is not None
                     else "no equation the model can write")
        lines.append(f"<p><b>gold</b> {esc(gold_text)} &nbsp; answer {esc(format_answer(float(row['answer'])))}</p>")
        if gold is not None:
            trees.append(("gold equation", gold))
    if not lines:
        return ""
    drawn = []
    for caption, prefix in trees:
        svg = tree_svg(prefix, OPS, lambda token: _leaf(token, numbers))
        drawn.append(f'<figure>{svg or "<p>(not one expression)</p>"}<figcaption>{caption}</figcaption></figure>')
    table = _candidates_table(decoded, numbers, values) if decoded is not None else ""
    return (f'<section id="answer"><h2>Equation</h2>{"".join(lines)}'
            f'<div class="trees">{"".join(drawn)}</div>{table}</section>')


def _candidates_table(decoded: Decoded, numbers: list[str], values: list[float]) -> str:
    rows = "".join(f"<tr><td>{k + 1}</td><td>x = {esc(infix_with_numbers(prefix, numbers))}</td>"
                   f"<td><code>{esc(' '.join(prefix))}</code></td><td>{score:.3f}</td><td>{math.exp(score):.3f}</td>"
                   f"<td>{esc(format_answer(_value(prefix, values)))}</td></tr>"
                   for k, (prefix, score) in enumerate(decoded.candidates))
    return (f'<h3>The beam\'s final candidates ({len(decoded.candidates)})</h3><p class="note">The finished '
            "expressions among the beams when the search stopped (it stops once a finished one outscores every "
            'live beam); the first is the answer.</p><table class="candidates">'
            "<tr><th>#</th><th>equation</th><th>prefix</th><th>log-probability</th><th>probability</th>"
            f"<th>answer</th></tr>{rows}</table>")


def _value(prefix: Sequence[str], values: Sequence[float]) -> float | None:
    try:
        return eval_prefix(prefix, as_written(values)) if prefix else None
    except ExprError:
        return None


def _leaf(token: str, numbers: Sequence[str]) -> tuple[str, str]:
    i = slot_index(token, len(numbers))
    if i is not None:
        return numbers[i], NODE_COLOURS["number"]
    return token, CONSTANT_COLOUR


def _graph_section(graph: Graph | None, variant: str, names: list[str], quantity: Sequence[int],
                   reads_graph: bool, line_graph: bool) -> str:
    parts = " + ".join(GRAPH_VARIANTS[variant])
    head = f'<section id="graph"><h2>Graph</h2><p class="note">graph arm <b>{variant}</b> (parts {parts}): ' \
           "the edges of other parts are not drawn.</p>"
    if not reads_graph:
        head += ('<p class="note"><b>This model reads no graph</b> (no graph encoder): the graph is drawn as the '
                 "data pipeline builds it, for reference.</p>")
    if graph is None:
        return head + "<p>No graph: none could be built for this problem.</p></section>"
    on_edge = np.zeros(graph.num_nodes, dtype=bool)
    on_edge[graph.edge_src] = on_edge[graph.edge_dst] = True
    by_type = np.bincount(graph.edge_type, minlength=len(EDGE_TYPES))
    counts = ", ".join(f"{EDGE_TYPES[t]} {n}" for t, n in enumerate(by_type.tolist()) if n)
    stats = (f"<p><b>{graph.num_nodes}</b> nodes ({int(on_edge.sum())} on edges, {int((~on_edge).sum())} on none), "
             f"<b>{graph.num_edges}</b> edges ({counts or 'none'}). <b>Line graph</b>: {graph.num_edges} nodes "
             f"(one per directed edge), {graph.num_line_edges} edges"
             f"{'' if line_graph else ' (this model does not use it)'}.</p>")
    draw = graph.num_edges <= MAX_DRAWN_EDGES
    if not draw:
        stats += f"<p>{graph.num_edges} edges are too many to draw (at most {MAX_DRAWN_EDGES}): the nodes alone.</p>"
    nodes = [Node(label=name.split(" ", 1)[-1] if v in quantity else name, mark=_mark(v, quantity),
                  type=NODE_TYPES[t], title=f"{name} · {NODE_TYPES[t]} · token {p}")
             for v, (name, t, p) in enumerate(zip(names, graph.node_type.tolist(), graph.node_pos.tolist()))]
    edges = [Edge(s, d, EDGE_TYPES[t], f"{names[s]} → {names[d]}: {EDGE_TYPES[t]}")
             for s, d, t in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_type.tolist())]
    svg = graph_svg(nodes, edges, graph.node_pos.tolist(), draw_edges=draw)
    info = ('<div id="edge-info">Point at an edge (or click it to keep it) to see its line-graph neighbours: '
            "the edges it leads to (dashed) and those that lead to it (dotted).</div>")
    return head + stats + _legend(graph) + f'<div class="canvas">{svg}</div>' + info + "</section>"


def _mark(v: int, quantity: Sequence[int]) -> str:
    return f"N{quantity.index(v)}" if v in quantity else ""


def _legend(graph: Graph) -> str:
    nodes = "".join(f'<span><i style="background:{NODE_COLOURS[t]}"></i>{t}</span>' for t in NODE_TYPES)
    used = sorted(set(graph.edge_type.tolist()))
    edges = "".join(f'<span><i class="line" style="background:{EDGE_COLOURS[EDGE_TYPES[t]]}"></i>{EDGE_TYPES[t]}</span>'
                    for t in used)
    return f'<p class="legend">{nodes}</p><p class="legend">{edges}</p>'


def _attention_section(graph: Graph | None, decoded: Decoded, names: list[str], quantity: Sequence[int]) -> str:
    head = '<section id="attention"><h2>Attention</h2>'
    if decoded.attention is None:
        return head + "<p>This model has no HLGT layers: no attention to show.</p></section>"
    if graph is None or not decoded.attention or decoded.attention[0].shape[0] != graph.num_edges:
        return head + "<p>No graph: no attention.</p></section>"
    layers = len(decoded.attention)
    heads = decoded.attention[0].shape[1]
    rows = []
    for i, v in enumerate(quantity):
        into = np.flatnonzero(graph.edge_dst == v) if v >= 0 else np.zeros(0, dtype=np.int64)
        cells = []
        for alpha in decoded.attention:
            weight = alpha[into].mean(1)                                    # [incoming] mean over heads
            top = into[np.argsort(-weight, kind="stable")][:TOP_ATTENTION]
            cells.append("<br>".join(f"{alpha[e].mean():.2f} {esc(names[graph.edge_src[e]])} "
                                     f"<small>{EDGE_TYPES[graph.edge_type[e]]}</small>" for e in top)
                         or "no edge into it")
        rows.append(f"<tr><th>{esc(names[v]) if v >= 0 else f'N{i}'}</th>"
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>layer {k + 1}</th>" for k in range(layers))
    return (head + f"<p class=\"note\">Each HLGT layer's attention from a quantity node over the nodes whose edges "
            f"lead into it: the top {TOP_ATTENTION}, averaged over the {heads} heads (each layer's weights "
            "into a node sum to 1).</p>"
            f'<table class="attention"><tr><th>quantity</th>{header}</tr>{"".join(rows)}</table></section>')


def _page_data(graph: Graph | None, names: list[str]) -> dict:
    """What the page's script reads: the edges and each edge's line-graph neighbours."""
    if graph is None:
        return {"names": [], "edges": [], "next": [], "prev": []}
    edges = [[s, d, EDGE_TYPES[t]] for s, d, t in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(),
                                                       graph.edge_type.tolist())]
    return {"names": names, "edges": edges, "next": _grouped(graph.line_src, graph.line_dst, graph.num_edges),
            "prev": _grouped(graph.line_dst, graph.line_src, graph.num_edges)}


def _grouped(key: np.ndarray, value: np.ndarray, n: int) -> list[list[int]]:
    """value grouped by key, for keys 0..n-1."""
    order = np.argsort(key, kind="stable")
    bounds = np.searchsorted(key[order], np.arange(n + 1))
    values = value[order].tolist()
    return [values[bounds[k]:bounds[k + 1]] for k in range(n)]


def _json(data: Any) -> str:
    """JSON safe inside a script element (no ``</`` can end it early)."""
    return json.dumps(data, ensure_ascii=False).replace("</", "<\\/")


def error_page(problem_id: str, text: str, error: str, *, about: Sequence[tuple[str, str]] = ()) -> str:
    """The page of a problem whose own page could not be made: its text and the error, so that the
    file's other pages and its index are still written."""
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8">{MARKER}<title>Problem {esc(problem_id)}</title>'
            f"<style>{CSS}</style></head>\n<body><header><h1>Problem {esc(problem_id)}</h1>{_about(about)}</header>"
            f'<div class="notice"><b>This page could not be drawn:</b> {esc(error)}</div>'
            f'<p class="tokens">{esc(text)}</p></body></html>\n')


def index_page(title: str, columns: Sequence[str], entries: Sequence[tuple[str, Sequence[str]]], *,
               about: Sequence[tuple[str, str]] = (), chart: str = "", note: str = "") -> str:
    """A folder's index: a table with one row per page, its first cell a link to the page file."""
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    rows = "".join(f'<tr><td><a href="{esc(file)}">{esc(cells[0])}</a></td>'
                   + "".join(f"<td>{esc(c)}</td>" for c in cells[1:]) + "</tr>" for file, cells in entries)
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8">{MARKER}<title>{esc(title)}</title>'
            f"<style>{CSS}</style></head>\n<body><header><h1>{esc(title)}</h1>{_about(about)}</header>"
            f'{chart}<p class="note">{esc(note)}</p><table class="index"><tr>{head}</tr>{rows}</table></body></html>\n')


CSS = """
body{font-family:system-ui,"Noto Sans CJK SC","WenQuanYi Zen Hei",sans-serif;margin:18px 24px;color:#222}
h1{font-size:1.4em;margin:0 0 4px}h2{font-size:1.15em;margin:18px 0 6px;border-bottom:1px solid #ddd}
h3{font-size:1em}p.about{margin:1px 0;color:#555;font-size:.9em}.note{color:#555;font-size:.9em}
.notice{border:2px solid #c0392b;background:#fdecea;padding:8px 12px;margin:10px 0}
.tokens{font-size:1.15em;line-height:2}.tok{padding:1px 1px;border-radius:3px}
.tok.q{background:#fde2df}.tok sub{color:#b03a2e;font-weight:bold;font-size:.7em}.tok.lit{outline:2px solid #2471a3}
.right{color:#1e8449}.wrong{color:#c0392b}
table{border-collapse:collapse;margin:6px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
.trees{display:flex;flex-wrap:wrap;gap:24px}figure{margin:0}figcaption{color:#555;font-size:.9em;text-align:center}
svg.tree line{stroke:#888;stroke-width:1.5}svg.tree circle{fill:#fff;stroke:#555;stroke-width:1.5}
svg.tree text{font-size:13px;text-anchor:middle}svg.tree .leaf text{fill:#fff;font-weight:bold}
.legend span{margin-right:14px;font-size:.9em;white-space:nowrap}.legend i{display:inline-block;width:12px;height:12px;
border-radius:6px;margin-right:4px;vertical-align:-1px}.legend i.line{height:4px;border-radius:0;vertical-align:3px}
.canvas{overflow-x:auto;border:1px solid #eee}
svg.graph path{fill:none;stroke-width:1.4;opacity:.8}svg.graph path.hit{stroke:transparent;stroke-width:10;opacity:1}
svg.graph g.edge{cursor:pointer}svg.graph g.edge text{font-size:9px;text-anchor:middle;paint-order:stroke;stroke:#fff;
stroke-width:3px}svg.graph .node text.mark{fill:#fff;font-size:9px;font-weight:bold;text-anchor:middle}
svg.graph .node text.label{font-size:11px;text-anchor:middle}svg.graph .node circle{stroke:#fff;stroke-width:1.5}
svg.graph line.apart{stroke:#ccc;stroke-dasharray:4 4}svg.graph text.caption{font-size:11px;fill:#777}
svg.focus g.edge{opacity:.12}
svg.focus g.edge.sel,svg.focus g.edge.next,svg.focus g.edge.prev,svg.focus g.edge.lit{opacity:1}
g.edge.sel path{stroke-width:3.5}g.edge.next path{stroke-width:2.6;stroke-dasharray:7 3}
g.edge.prev path{stroke-width:2.6;stroke-dasharray:2 3}g.node.lit circle{stroke:#222;stroke-width:3}
#edge-info{min-height:3em;background:#f7f7f7;padding:6px 10px;font-size:.92em}
svg.chart rect{fill:#2471a3}svg.chart text{font-size:11px;text-anchor:middle}svg.chart text.caption{text-anchor:start;
font-size:13px}svg.chart text.tick{text-anchor:end}svg.chart line.grid{stroke:#ddd}
#script-status{color:#aaa;font-size:.8em}
"""

SCRIPT = r"""
(function () {
  var status = document.getElementById("script-status");
  function report(state, text) { status.setAttribute("data-state", state); status.textContent = text; }
  window.addEventListener("error", function (e) { report("error", "error: " + e.message); });
  try {
    var data = JSON.parse(document.getElementById("explain-data").textContent);
    var svg = document.querySelector("svg.graph");
    var edges = {}, nodes = {}, tokens = {}, pinned = null;
    var info = document.getElementById("edge-info");
    document.querySelectorAll("svg.graph g.edge").forEach(function (g) { edges[g.getAttribute("data-e")] = g; });
    document.querySelectorAll("svg.graph g.node").forEach(function (g) { nodes[g.getAttribute("data-n")] = g; });
    document.querySelectorAll(".tok[data-n]").forEach(function (s) { tokens[s.getAttribute("data-n")] = s; });
    function name(e) {
      var d = data.edges[e];
      return data.names[d[0]] + " \u2192" + d[2] + "\u2192 " + data.names[d[1]];
    }
    function clear() {
      if (!svg) return;
      svg.classList.remove("focus");
      document.querySelectorAll(".sel,.next,.prev,.lit").forEach(function (el) {
        el.classList.remove("sel", "next", "prev", "lit"); });
    }
    function line(label, list) {
      var p = document.createElement("div");
      p.textContent = label + " (" + list.length + "): " + (list.map(name).join("; ") || "none");
      return p;
    }
    function showEdge(e) {
      clear(); svg.classList.add("focus"); edges[e].classList.add("sel");
      data.next[e].forEach(function (f) { edges[f].classList.add("next"); });
      data.prev[e].forEach(function (f) { edges[f].classList.add("prev"); });
      info.textContent = "";
      var head = document.createElement("b");
      head.textContent = "edge " + e + ": " + name(e) + (pinned === null ? "" : " (kept; click it again to let go)");
      info.appendChild(head);
      info.appendChild(line("leads to, in the line graph", data.next[e]));
      info.appendChild(line("led to from", data.prev[e]));
    }
    function showNode(n, on) {
      [nodes[n], tokens[n]].forEach(function (el) { if (el) el.classList.toggle("lit", on); });
    }
    Object.keys(edges).forEach(function (e) {
      var g = edges[e];
      g.addEventListener("mouseenter", function () { if (pinned === null) showEdge(e); });
      g.addEventListener("mouseleave", function () { if (pinned === null) clear(); });
      g.addEventListener("click", function (ev) { ev.stopPropagation(); pinned = pinned === e ? null : e;
        if (pinned === null) clear(); else showEdge(e); });
    });
    Object.keys(nodes).forEach(function (n) {
      nodes[n].addEventListener("mouseenter", function () { showNode(n, true); });
      nodes[n].addEventListener("mouseleave", function () { showNode(n, false); });
      if (tokens[n]) {
        tokens[n].addEventListener("mouseenter", function () { showNode(n, true); });
        tokens[n].addEventListener("mouseleave", function () { showNode(n, false); });
      }
    });
    if (svg) svg.addEventListener("click", function () { pinned = null; clear(); });
    report("ok", "ok nodes=" + Object.keys(nodes).length + " edges=" + Object.keys(edges).length);
  } catch (e) {
    report("error", "error: " + e);
  }
})();
"""


def explain_problem(dataset: str, problem_id: str, out: str, data_dir: str | None = None, split: str | None = None,
                    annotator: str = "offline", annotator_model: str = "", graph: str = "srl") -> str:
    """The page of one problem, straight from its raw file, with ``annotator`` and no model
    (``data_page``); the page's file is checked before anything is read. Returns a
    line saying what was written."""
    page = check_page_file(out, "--explain")
    annotate = make_annotator(annotator, annotator_model)
    try:
        getattr(annotate, "load", lambda: None)()
    except AnnotatorLoadError as error:
        raise ValueError(f"--annotator {annotator}: {error}") from None
    problem, found_in = find_problem(dataset, problem_id, resolve_data_dir(data_dir), (split,) if split else SPLITS)
    about = [("data", f"{dataset}, the {found_in} file {problem.source}"), ("annotator", annotator),
             ("model", "none: the graph as the data pipeline builds it")]
    write_text(page, data_page(problem, annotate, graph, about))
    return f"problem {problem.id} of {dataset} ({found_in}) -> {page}"
