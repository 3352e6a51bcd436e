"""Inline SVG for the explain pages (``hlgt.explain``): a problem's graph, an expression tree, a bar
chart. Each is a string of SVG for an HTML page (inside HTML an ``<svg>`` needs no namespace URL),
laid out here with numpy alone: deterministic, so the same graph is drawn the same way every time.

The graph's layout: the nodes on some edge start in reading order across the canvas and in a band
by type down it (predicates at the top, then entities, units and rates, numbers at the bottom),
then settle under a Fruchterman-Reingold force layout (every edge pulls its two nodes together,
every pair of nodes pushes apart) with a weak pull back to their band, so that linked words come
together while the layers stay readable. Nodes on no edge of the drawn graph are set apart below
it, in a grid in reading order. Edges are directed and bend to their left, so that the two
directions between two nodes (ARG both ways, BAE one way and LES back) are two arcs, each with an
arrowhead and its label at its middle.

Every node is a ``<g class="node">`` and every edge a ``<g class="edge">``, numbered by
``data-n`` and ``data-e`` as the caller numbers them, with its type in ``data-type``: the page's
script and its tests find them by these.
"""
from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

NODE_COLOURS = {"entity": "#6aa56a", "root": "#e0a030", "unit": "#4a9fd8", "rate": "#1c5d8c",
                "fraction": "#b03a8c", "percentage": "#7b4fc4", "number": "#d0453a"}
EDGE_COLOURS = {"ARG0": "#c0392b", "ARG1": "#d35400", "ARGM": "#b7950b", "MOD": "#7f8c8d", "BAE": "#2471a3",
                "LES": "#17a589", "DT": "#8e44ad", "DEP": "#566573", "QCELL": "#a04000", "GT": "#1e8449"}
# Where each node type starts down the canvas (0 top, 1 bottom).
BANDS = {"root": 0.08, "entity": 0.38, "unit": 0.64, "rate": 0.64, "fraction": 0.92, "percentage": 0.92,
         "number": 0.92}
ITERATIONS = 300
# Above this many nodes on edges the force layout (quadratic in them per step) is skipped: the
# nodes keep their reading-order and type-band places.
MAX_FORCE_NODES = 700
RADIUS = 13
CELL = (86, 48)  # width and height of an isolated node's grid cell
MARGIN = 36


@dataclass(frozen=True)
class Node:
    label: str  # under the circle
    mark: str  # inside the circle (a quantity's N0), or ""
    type: str  # a NODE_TYPES name
    title: str  # the tooltip


@dataclass(frozen=True)
class Edge:
    src: int
    dst: int
    type: str  # an EDGE_TYPES name
    title: str


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def layout(order: Sequence[float], types: Sequence[str], src: Sequence[int], dst: Sequence[int],
           iterations: int = ITERATIONS) -> np.ndarray:
    """[N, 2] places in the unit square of the nodes on some edge (module docstring), NaN for the
    others. ``order``: each node's place in reading order (its token); ``types``: NODE_TYPES names."""
    n_all = len(order)
    out = np.full((n_all, 2), np.nan)
    on_edge = np.zeros(n_all, dtype=bool)
    on_edge[np.asarray(src, dtype=np.int64)] = True
    on_edge[np.asarray(dst, dtype=np.int64)] = True
    idx = np.flatnonzero(on_edge)
    n = len(idx)
    if n == 0:
        return out
    local = np.cumsum(on_edge) - 1                                      # [N] id among the nodes on edges
    rank = np.argsort(np.argsort(np.asarray(order, dtype=float)[idx], kind="stable"), kind="stable")
    band = np.array([BANDS[types[i]] for i in idx])
    start = np.stack([(rank + 0.5) / n, band + 0.05 * ((rank % 3) - 1)], axis=1)  # [n, 2]
    pos = start.copy()
    pairs = np.unique(np.sort(np.stack([local[src], local[dst]], axis=1), axis=1), axis=0)  # [P, 2] undirected
    if 1 < n <= MAX_FORCE_NODES:
        pos = _settle(pos, pairs, band, iterations)
    span = pos.max(0) - pos.min(0)
    out[idx] = (pos - pos.min(0)) / np.where(span > 1e-9, span, 1.0) + np.where(span > 1e-9, 0.0, 0.5)
    return out


def _settle(pos: np.ndarray, pairs: np.ndarray, band: np.ndarray, iterations: int) -> np.ndarray:
    """Fruchterman-Reingold steps with a cooling step size and a pull of each node's height back
    to its band."""
    n = len(pos)
    k = 0.9 / np.sqrt(n)                                                # the ideal edge length
    step = 0.1
    a, b = pairs[:, 0], pairs[:, 1]
    for _ in range(iterations):
        delta = pos[:, None, :] - pos[None, :, :]                       # [n, n, 2]
        dist2 = np.maximum((delta ** 2).sum(-1), 1e-6)                  # [n, n]
        force = (delta * (k * k / dist2)[..., None]).sum(1)             # [n, 2] repulsion k^2 / d
        d = pos[a] - pos[b]                                             # [P, 2]
        pull = d * (np.sqrt((d ** 2).sum(-1)) / k)[:, None]             # [P, 2] attraction d^2 / k
        np.add.at(force, a, -pull)
        np.add.at(force, b, pull)
        force[:, 1] += 2.0 * (band - pos[:, 1])
        length = np.maximum(np.sqrt((force ** 2).sum(-1)), 1e-9)[:, None]
        pos = pos + force / length * np.minimum(length, step)
        step = max(step * 0.985, 0.002)
    return pos


def graph_svg(nodes: Sequence[Node], edges: Sequence[Edge], order: Sequence[float], draw_edges: bool = True) -> str:
    """The graph as SVG: nodes on some edge laid out above (``layout``), the others in a grid below
    under a caption. ``draw_edges`` False: the nodes alone, every one in the grid."""
    shown = edges if draw_edges else []
    unit = layout(order, [v.type for v in nodes], [e.src for e in shown], [e.dst for e in shown])
    placed = ~np.isnan(unit[:, 0])
    n_placed = int(placed.sum())
    width = int(np.clip(150 * np.sqrt(max(n_placed, 1)), 680, 1500))
    top = int(np.clip(0.6 * width, 320, 900)) if n_placed else 0
    xy = np.zeros((len(nodes), 2))
    xy[placed] = MARGIN + unit[placed] * [width - 2 * MARGIN, top - 2 * MARGIN]
    apart = [i for i in np.argsort(np.asarray(order, dtype=float), kind="stable") if not placed[i]]
    columns = max(1, (width - 2 * MARGIN) // CELL[0])
    rows = -(-len(apart) // columns)
    for k, i in enumerate(apart):
        xy[i] = (MARGIN + CELL[0] * (k % columns + 0.5), top + 44 + CELL[1] * (k // columns))
    height = top + (44 + CELL[1] * rows + 10 if apart else 10)
    parts = [f'<svg class="graph" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
             _markers()]
    if apart:
        caption = "nodes on no edge of this graph" if draw_edges else "nodes (edges not drawn)"
        parts.append(f'<line class="apart" x1="{MARGIN}" y1="{top + 8}" x2="{width - MARGIN}" y2="{top + 8}"/>'
                     f'<text class="caption" x="{MARGIN}" y="{top + 26}">{caption}: {len(apart)}</text>')
    parts += [_edge(i, e, xy) for i, e in enumerate(shown)]
    parts += [_node(i, v, xy[i]) for i, v in enumerate(nodes)]
    return "\n".join(parts) + "\n</svg>"


def _markers() -> str:
    arrows = "".join(f'<marker id="arrow-{t}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
                     f'markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="{c}"/></marker>'
                     for t, c in EDGE_COLOURS.items())
    return f"<defs>{arrows}</defs>"


def _edge(i: int, e: Edge, xy: np.ndarray) -> str:
    p0, p2 = xy[e.src], xy[e.dst]
    d = p2 - p0
    length = max(float(np.hypot(*d)), 1e-6)
    left = np.array([d[1], -d[0]]) / length                             # the left of the direction, on screen
    control = (p0 + p2) / 2 + left * float(np.clip(0.18 * length, 14, 60))
    start = p0 + (control - p0) / max(float(np.hypot(*(control - p0))), 1e-6) * RADIUS
    end = p2 + (control - p2) / max(float(np.hypot(*(control - p2))), 1e-6) * (RADIUS + 1)
    mid = 0.25 * start + 0.5 * control + 0.25 * end
    colour = EDGE_COLOURS[e.type]
    curve = f"M{start[0]:.1f},{start[1]:.1f} Q{control[0]:.1f},{control[1]:.1f} {end[0]:.1f},{end[1]:.1f}"
    return (f'<g class="edge" data-e="{i}" data-type="{e.type}" data-src="{e.src}" data-dst="{e.dst}">'
            f'<title>{esc(e.title)}</title><path class="hit" d="{curve}"/>'  # a wide, invisible target for the pointer
            f'<path d="{curve}" stroke="{colour}" marker-end="url(#arrow-{e.type})"/>'
            f'<text x="{mid[0]:.1f}" y="{mid[1]:.1f}" fill="{colour}">{e.type}</text></g>')


def _node(i: int, v: Node, p: np.ndarray) -> str:
    label = v.label if len(v.label) <= 8 else v.label[:7] + "…"
    return (f'<g class="node" data-n="{i}" data-type="{v.type}" transform="translate({p[0]:.1f},{p[1]:.1f})">'
            f'<title>{esc(v.title)}</title><circle r="{RADIUS}" fill="{NODE_COLOURS[v.type]}"/>'
            f'<text class="mark" y="4">{esc(v.mark)}</text>'
            f'<text class="label" y="{RADIUS + 12}">{esc(label)}</text></g>')


def prefix_tree(prefix: Sequence[str], operators: Sequence[str]):
    """A prefix expression as nested (token, children) pairs; None when it is not one expression."""
    ops = set(operators)

    def read(i: int):
        if i >= len(prefix):
            raise IndexError
        if prefix[i] in ops:
            left, j = read(i + 1)
            right, k = read(j)
            return (prefix[i], [left, right]), k
        return (prefix[i], []), i + 1

    try:
        tree, end = read(0)
    except (IndexError, RecursionError):
        return None
    return tree if end == len(prefix) else None


def tree_svg(prefix: Sequence[str], operators: Sequence[str], leaf: Callable[[str], tuple[str, str]],
             css_class: str = "tree") -> str | None:
    """The expression tree of a prefix: operators in circles, leaves as ``leaf(token)`` = (text,
    colour) in boxes; leaves side by side in order, each operator above the middle of its
    children. None when the prefix is no expression."""
    tree = prefix_tree(prefix, operators)
    if tree is None:
        return None
    placed: list[tuple[str, bool, float, int, int]] = []  # token, is a leaf, x, depth, parent index
    leaves = [0]

    def place(node, depth: int, parent: int) -> float:
        token, children = node
        me = len(placed)
        placed.append((token, not children, 0.0, depth, parent))
        if children:
            x = sum(place(c, depth + 1, me) for c in children) / len(children)
        else:
            x, leaves[0] = float(leaves[0]), leaves[0] + 1
        placed[me] = (token, not children, x, depth, parent)
        return x

    place(tree, 0, -1)
    dx, dy = 64, 58
    width = int(leaves[0] * dx + 20)
    height = int((max(p[3] for p in placed) + 1) * dy + 10)
    at = [(10 + dx * (x + 0.5), 30 + dy * depth) for _, _, x, depth, _ in placed]
    lines = [f'<line x1="{at[p][0]:.0f}" y1="{at[p][1]:.0f}" x2="{at[i][0]:.0f}" y2="{at[i][1]:.0f}"/>'
             for i, (_, _, _, _, p) in enumerate(placed) if p >= 0]
    shapes = []
    for (token, is_leaf, _, _, _), (x, y) in zip(placed, at):
        if is_leaf:
            text, colour = leaf(token)
            shown = text if len(text) <= 9 else text[:8] + "…"  # the box's width; the whole in its title
            shapes.append(f'<g class="leaf"><title>{esc(text)}</title><rect x="{x - 29:.0f}" y="{y - 13:.0f}" '
                          f'width="58" height="26" rx="6" fill="{colour}"/><text x="{x:.0f}" y="{y + 4:.0f}">'
                          f'{esc(shown)}</text></g>')
        else:
            shapes.append(f'<g class="op"><circle cx="{x:.0f}" cy="{y:.0f}" r="15"/>'
                          f'<text x="{x:.0f}" y="{y + 5:.0f}">{esc(token)}</text></g>')
    return (f'<svg class="{css_class}" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
            + "".join(lines) + "".join(shapes) + "</svg>")


def bar_chart(bars: Sequence[tuple[str, float, str]], caption: str) -> str:
    """Vertical bars of shares in [0, 1]: (label under the bar, share, note above it)."""
    dx, high, base = 72, 180, 210
    width = 60 + dx * len(bars)
    parts = [f'<svg class="chart" width="{width}" height="{base + 50}" viewBox="0 0 {width} {base + 50}" role="img">',
             f'<text class="caption" x="10" y="16">{esc(caption)}</text>']
    for tick in (0, 0.5, 1):
        y = base - high * tick
        parts.append(f'<line class="grid" x1="44" y1="{y:.0f}" x2="{width - 10}" y2="{y:.0f}"/>'
                     f'<text class="tick" x="40" y="{y + 4:.0f}">{100 * tick:.0f}%</text>')
    for k, (label, share, note) in enumerate(bars):
        x, h = 54 + dx * k, high * min(max(share, 0.0), 1.0)
        parts.append(f'<g class="bar"><rect x="{x}" y="{base - h:.1f}" width="{dx - 18}" height="{h:.1f}"/>'
                     f'<text class="value" x="{x + (dx - 18) / 2:.0f}" y="{base - h - 6:.1f}">{esc(note)}</text>'
                     f'<text class="label" x="{x + (dx - 18) / 2:.0f}" y="{base + 18}">{esc(label)}</text></g>')
    return "\n".join(parts) + "\n</svg>"
