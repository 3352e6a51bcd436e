"""The explain pages: what a page holds (every node and edge of the model's graph arm, their types
and labels, the line graph, the beam, the attention, no external URL), the commands that write
them (solve, evaluate, the data report), bad input and paths that cannot take a page, and, where
Chromium is installed, the page opened in a browser."""
import json
import re
import shutil
import subprocess
from html import escape
from html.parser import HTMLParser

import numpy as np
import pytest

from hlgt import explain
from hlgt.data.graph import EDGE_TYPES, GRAPH_PARTS, GRAPH_VARIANTS, NODE_TYPES, Graph, select_variant
from hlgt.data.numbers import to_example
from hlgt.data.splits import find_problem
from hlgt.data.srl import make_annotator
from hlgt.draw import layout, prefix_tree, tree_svg
from hlgt.pages import PageFolder, check_page_file, is_page

EN = "A farmer has 120 apples. He sells 3/4 of them. How many apples does he sell?"
ZH = "一根绳子长12米，用去了(1/4)，还剩多少米？"


class PageParts(HTMLParser):
    """The graph's node and edge groups (attributes and texts), every src/href, the JSON data."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.nodes, self.edges, self.urls = [], [], []
        self.group, self.text, self.script = None, None, None
        self.data = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.urls += [v for k, v in attrs if k in ("src", "href", "xlink:href", "action", "poster")]
        if tag == "g" and a.get("class") in ("node", "edge"):
            self.group = {**a, "texts": []}
            (self.nodes if a["class"] == "node" else self.edges).append(self.group)
        elif tag == "text" and self.group is not None:
            self.text = self.group["texts"]
            self.text.append("")
        elif tag == "script":
            self.script = a.get("id", "")

    def handle_endtag(self, tag):
        if tag == "g":
            self.group = None
        elif tag == "text":
            self.text = None
        elif tag == "script":
            self.script = None

    def handle_data(self, data):
        if self.text is not None:
            self.text[-1] += data
        if self.script == "explain-data":
            self.data = json.loads(data)


def sample_row(problem_id="zh-22", annotator="offline"):
    problem, _ = find_problem("sample", problem_id)
    row, no_graph = explain.example_row(to_example(problem), make_annotator(annotator))
    assert no_graph is None
    return row


@pytest.mark.parametrize("variant", sorted(GRAPH_VARIANTS))
def test_every_node_and_edge_of_the_arm_is_drawn_with_its_type_and_label(variant):
    row = sample_row("en-08")
    graph = select_variant(Graph.from_lists(row), variant)
    parts = PageParts(explain.page(row, variant))
    assert [int(n["data-n"]) for n in parts.nodes] == list(range(graph.num_nodes))
    assert [n["data-type"] for n in parts.nodes] == [NODE_TYPES[t] for t in graph.node_type]
    want = list(zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), [EDGE_TYPES[t] for t in graph.edge_type]))
    assert [(int(e["data-src"]), int(e["data-dst"]), e["data-type"]) for e in parts.edges] == want
    assert all(e["texts"] == [e["data-type"]] for e in parts.edges)  # each edge labelled by its type
    # Only the arm's parts: no edge of another part is drawn.
    arm_types = {EDGE_TYPES[t] for t in Graph.from_lists(row).edge_type[
        np.isin(Graph.from_lists(row).edge_part, [GRAPH_PARTS.index(p) for p in GRAPH_VARIANTS[variant]])]}
    assert {e["data-type"] for e in parts.edges} == arm_types
    # The quantities are marked in the drawing and in the text.
    marks = {n["texts"][0]: int(n["data-n"]) for n in parts.nodes if n["texts"][0]}
    assert sorted(marks) == [f"N{i}" for i in range(len(row["num_pos"]))]
    assert [int(graph.node_pos[marks[f"N{i}"]]) for i in range(len(marks))] == list(row["num_pos"])


def test_the_line_graph_and_each_edges_neighbours_are_on_the_page():
    row = sample_row("zh-22")
    graph = select_variant(Graph.from_lists(row), "srl")
    page = explain.page(row, "srl")
    data = PageParts(page).data
    assert f"{graph.num_edges} nodes (one per directed edge), {graph.num_line_edges} edges" in page
    pairs = {(int(a), int(b)) for a, b in zip(graph.line_src, graph.line_dst)}
    assert {(e, f) for e, after in enumerate(data["next"]) for f in after} == pairs
    assert {(f, e) for e, before in enumerate(data["prev"]) for f in before} == pairs
    assert [d[2] for d in data["edges"]] == [EDGE_TYPES[t] for t in graph.edge_type]


@pytest.mark.parametrize("encoder, reads_graph, reads_line_graph, not_read", [
    ("hlgt", True, True, []), ("none", False, False, ["graph srl", "node types on", "line graph on"]),
    ("hgt", True, False, ["line graph on"]), ("rgat", True, False, ["node types on", "line graph on"])])
def test_a_page_says_what_of_the_graph_its_model_reads(encoder, reads_graph, reads_line_graph, not_read):
    # GTS reads no graph, the HGT and RGAT baselines no line graph: the page does not claim they do.
    from hlgt.config import Config

    flat = Config.from_flat({"model.encoder": encoder}).to_flat()
    assert explain.reads(flat) == {"reads_graph": reads_graph, "line_graph": reads_line_graph}
    arm = dict(explain.about_model("m", flat))["arm"]
    assert [part.removesuffix(" (not read)") for part in arm.split(", ") if part.endswith("(not read)")] == not_read
    page = explain.page(sample_row("zh-22"), "srl", **explain.reads(flat))
    assert ("This model reads no graph" in page) != reads_graph
    assert ("(this model does not use it)" in page) != reads_line_graph


def assert_offline(page: str) -> None:
    """Nothing on the page is fetched: no URL but the page's own #markers, no element that loads one."""
    parts = PageParts(page)
    assert all(re.fullmatch(r"[\w.-]+\.html", u) for u in parts.urls) and "http" not in page  # an index's pages
    assert all(u.startswith("#") for u in re.findall(r"url\(([^)]*)\)", page))  # only the page's own markers
    assert not re.search(r"<(link|img|iframe|object|embed)\b", page) and "@import" not in page
    assert '<script src' not in page


def test_a_page_fetches_nothing():
    page = explain.page(sample_row("zh-38"), "srl")
    assert_offline(page)
    assert PageParts(page).urls == [] and page.count("<script") == 2


def test_text_that_looks_like_markup_stays_text():
    from hlgt.data.numbers import Example, extract_quantities

    tokens, quantities = extract_quantities(["Tom", "has", "3", "</script><b>", "and", "4", "pears", "."])
    example = Example(id="<i>x</i>", lang="en", source="t", tokens=tokens, quantities=quantities, prefix=None,
                      answer=float("nan"))
    row, _ = explain.example_row(example, make_annotator("offline"))
    page = explain.page(row, "srl")
    assert page.count("</script>") == 2 and "</script><b>" not in page and "<i>x</i>" not in page
    assert "&lt;/script&gt;&lt;b&gt;" in page and "&lt;i&gt;x&lt;/i&gt;" in page
    assert PageParts(page).data["names"]  # the data block still parses


def test_layout_is_deterministic_and_sets_the_nodes_on_no_edge_apart():
    row = sample_row("en-08")
    graph = select_variant(Graph.from_lists(row), "srl")
    types = [NODE_TYPES[t] for t in graph.node_type]
    a = layout(graph.node_pos.tolist(), types, graph.edge_src, graph.edge_dst)
    b = layout(graph.node_pos.tolist(), types, graph.edge_src, graph.edge_dst)
    assert np.array_equal(a, b, equal_nan=True)
    on_edge = np.isin(np.arange(graph.num_nodes), np.concatenate([graph.edge_src, graph.edge_dst]))
    assert np.isnan(a[~on_edge]).all() and (a[on_edge] >= 0).all() and (a[on_edge] <= 1).all()
    page = explain.page(row, "srl")
    y = {int(n): float(t) for n, t in re.findall(r'data-n="(\d+)"[^>]*translate\([\d.]+,([\d.]+)\)', page)}
    assert min(y[i] for i in np.flatnonzero(~on_edge)) > max(y[i] for i in np.flatnonzero(on_edge))


def test_expression_trees():
    assert prefix_tree(["*", "N0", "+", "N1", "2"], "+-*/^") == \
        ("*", [("N0", []), ("+", [("N1", []), ("2", [])])])
    assert prefix_tree(["*", "N0"], "+-*/^") is None and prefix_tree(["N0", "N1"], "+-*/^") is None
    svg = tree_svg(["-", "N0", "*", "N0", "N1"], "+-*/^", lambda t: (t, "#ccc"))
    assert svg.count('class="op"') == 2 and svg.count('class="leaf"') == 3 and svg.count("<line") == 4
    # A leaf too long for its box is cut visibly, never into another number; its title holds it whole.
    numbers = {"N0": "1234567.89", "N1": "12,345,678", "N2": "(12/125)"}
    svg = tree_svg(["+", "N0", "*", "N1", "N2"], "+-*/^", lambda t: (numbers[t], "#ccc"))
    leaves = re.findall(r"<g class=\"leaf\">.*?<text [^>]*>([^<]*)</text>", svg)
    assert leaves == ["1234567.…", "12,345,6…", "(12/125)"]
    assert all(f"<title>{n}</title>" in svg for n in numbers.values())


def test_a_data_page_shows_the_gold_equation_and_what_the_rules_say():
    from hlgt.expr import infix_with_numbers

    problem, _ = find_problem("sample", "zh-06")
    example = to_example(problem)
    page = explain.data_page(problem, make_annotator("offline"), "srl", about=[("model", "none")])
    gold = infix_with_numbers(example.prefix, [q.text for q in example.quantities])
    assert f"<b>gold</b> x = {gold}" in page.replace("&nbsp;", " ") and "1(1/2)" in gold
    assert 'class="notice"' not in page and page.count('<svg class="tree"') == 1 and "candidates" not in page
    # A problem the data rules leave out still gets its page, under a note that says why.
    bad = problem.__class__(**{**problem.__dict__, "answer": "many"})
    page = explain.data_page(bad, make_annotator("offline"), "srl")
    assert "What the data rules say" in page and "unreadable_answer" in page and '<svg class="graph"' in page


# ---- with a model (tests/conftest.py's model_dir) ------------------------------------------------


def test_a_solved_text_gets_its_beam_and_attention(model_dir, tmp_path, capsys):
    from hlgt.commands.solve import main
    from hlgt.inference import load_model
    from hlgt.solve import problem_row, solve_text

    page = tmp_path / "p.html"
    assert main(["--model", str(model_dir), EN, "--explain", str(page)]) == 0
    assert f"page:     {page}" in capsys.readouterr().out and is_page(page)
    html = page.read_text(encoding="utf-8")
    solver, flat = load_model(model_dir)
    row = problem_row(EN, None, make_annotator("offline"))
    decoded = explain.decode(solver, row, flat["data.graph"])
    assert decoded.candidates[0][0] == solve_text(model_dir, EN).prefix
    assert f"The beam's final candidates ({len(decoded.candidates)})" in html
    assert html.count("<tr><td>") == len(decoded.candidates)
    graph = select_variant(Graph.from_lists(row), flat["data.graph"])
    assert len(decoded.attention) == solver.cfg.layers
    assert all(a.shape == (graph.num_edges, solver.cfg.heads) for a in decoded.attention)
    table = html[html.index('<table class="attention">'):]
    assert table.count("<tr><th>N") == len(row["num_pos"]) and table.count("<th>layer ") == solver.cfg.layers


@pytest.mark.parametrize("text, says, graph", [
    ("小明很开心。", "no quantities found", True),
    ("A farmer counts " + " ".join(str(i) for i in range(1, 33)) + " apples. How many?", "32 quantities", True),
    # Its graph cannot be built (the line graph's limit): the page says so.
    ("A farmer counts " + " ".join(str(i) for i in range(1, 301)) + " apples. How many?", "300 quantities", False),
    ("小明有3个苹果" + "很好" * 6000, "characters", False),  # not even read
])
def test_a_text_the_model_cannot_read_gets_a_page_saying_why(model_dir, tmp_path, text, says, graph):
    from hlgt.commands.solve import main

    page = tmp_path / "p.html"
    with pytest.raises(ValueError, match=f"{says}.*the page {page} shows what could be read"):
        main(["--model", str(model_dir), text, "--explain", str(page)])
    html = page.read_text(encoding="utf-8")
    notice = html[html.index('class="notice"'):html.index("</div>", html.index('class="notice"'))]
    assert says in notice and "The model cannot read this problem" in notice
    assert ('<svg class="graph"' in html) == graph and ("No graph" in html) != graph
    if says == "300 quantities":
        assert "no graph could be built: the line graph would have" in notice


def test_a_page_that_cannot_be_drawn_is_one_page_saying_why_and_the_file_goes_on(model_dir, tmp_path, monkeypatch):
    from hlgt import explain
    from hlgt.commands.solve import main

    decode = explain.decode

    def broken_for_b(solver, row, *args, **kwargs):
        if row["id"] == "b":
            raise RuntimeError("drawing failed")
        return decode(solver, row, *args, **kwargs)

    monkeypatch.setattr(explain, "decode", broken_for_b)
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"id": i, "text": ZH}, ensure_ascii=False) + "\n" for i in "abc"),
                        encoding="utf-8")
    pages = tmp_path / "pages"
    assert main(["--model", str(model_dir), "--file", str(problems), "--explain-dir", str(pages)]) == 0
    index = (pages / "index.html").read_text(encoding="utf-8")
    links = re.findall(r'<a href="([^"]+)">([^<]+)</a>', index)
    assert [name for _, name in links] == ["a", "b", "c"]
    failed = (pages / links[1][0]).read_text(encoding="utf-8")
    assert "The model failed on this problem" in failed and "RuntimeError: drawing failed" in failed
    assert "The beam's final candidates" in (pages / links[2][0]).read_text(encoding="utf-8")
    assert "decoding failed: RuntimeError: drawing failed" in index


def test_a_files_pages_and_answers_come_from_one_decode_and_agree(model_dir, tmp_path, monkeypatch):
    import hlgt.inference
    from hlgt.commands.solve import main

    texts = {"a": ZH, "b": EN, "c": "小明很开心。", "d": "小红有5支笔，又买了3支，一共有几支？"}
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in texts.items()),
                        encoding="utf-8")
    plain, paged, pages = tmp_path / "plain.jsonl", tmp_path / "paged.jsonl", tmp_path / "pages"
    assert main(["--model", str(model_dir), "--file", str(problems), "--out", str(plain)]) == 0
    calls = []
    decode = explain.decode
    monkeypatch.setattr(hlgt.inference, "predict", lambda *a, **k: pytest.fail("a second, batched decode"))
    monkeypatch.setattr(explain, "decode", lambda solver, row, *a, **k: calls.append(row["id"]) or decode(
        solver, row, *a, **k))
    assert main(["--model", str(model_dir), "--file", str(problems), "--out", str(paged), "--explain-dir",
                 str(pages)]) == 0
    assert calls == ["a", "b", "d"]  # once each; "c" has no quantities and is not decoded
    answers = [json.loads(line) for line in paged.read_text(encoding="utf-8").splitlines()]
    assert answers == [json.loads(line) for line in plain.read_text(encoding="utf-8").splitlines()]
    index = (pages / "index.html").read_text(encoding="utf-8")
    links = {name: href for href, name in re.findall(r'<a href="([^"]+)">([^<]+)</a>', index)}
    for entry in answers:
        html = (pages / links[entry["id"]]).read_text(encoding="utf-8")
        if "error" in entry:
            assert "no quantities" in html and "The beam's final candidates" not in html
            continue
        assert f"<b>model</b> {escape(entry['equation'])} &nbsp;" in html


@pytest.mark.parametrize("args, error, message", [
    (["--explain", "missing/p.html"], FileNotFoundError, "there is no folder"),
    (["--explain", "."], IsADirectoryError, "is a folder"),
    (["--explain", "notes.html"], FileExistsError, "not a page this command wrote"),
])
def test_a_page_path_that_cannot_be_written_is_refused_before_any_work(tmp_path, monkeypatch, args, error, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.html").write_text("<p>mine</p>")
    from hlgt.commands.solve import main

    with pytest.raises(error, match=message):  # no model folder: the refusal comes first
        main(["--model", "no/model", EN, *args])
    assert (tmp_path / "notes.html").read_text() == "<p>mine</p>"


def test_a_page_folder_that_cannot_take_pages_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        PageFolder(tmp_path / "file")
    with pytest.raises(NotADirectoryError, match="not a folder"):
        PageFolder(tmp_path / "file" / "pages")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "report.html").write_text("<p>mine</p>")
    with pytest.raises(FileExistsError, match="report.html"):
        PageFolder(tmp_path / "mine")
    folder = PageFolder(tmp_path / "new" / "pages")
    with folder, pytest.raises(OSError, match="another command is writing"):
        with PageFolder(tmp_path / "new" / "pages"):
            pass
    assert check_page_file(tmp_path / "new" / "page.html") == tmp_path / "new" / "page.html"


def test_a_file_gets_a_page_per_problem_and_an_index(model_dir, tmp_path, capsys):
    from hlgt.commands.solve import main

    problems = tmp_path / "problems.jsonl"
    problems.write_text("\n".join([json.dumps({"id": "a", "text": ZH}, ensure_ascii=False), "{not json",
                                   json.dumps({"id": "b/2", "text": "小明很开心。"}, ensure_ascii=False),
                                   json.dumps({"text": EN})]) + "\n", encoding="utf-8")
    pages = tmp_path / "pages"
    assert main(["--model", str(model_dir), "--file", str(problems), "--explain-dir", str(pages)]) == 0
    assert f"-> {pages}/index.html" in capsys.readouterr().out
    index = (pages / "index.html").read_text(encoding="utf-8")
    links = re.findall(r'<a href="([^"]+)">([^<]+)</a>', index)
    assert [name for _, name in links] == ["a", "2", "b/2", "4"]
    assert sorted(p.name for p in pages.glob("*.html")) == sorted([f for f, _ in links] + ["index.html"])
    assert "not JSON" in (pages / links[1][0]).read_text() and "no quantities" in (pages / links[2][0]).read_text()
    assert "The beam's final candidates" in (pages / links[0][0]).read_text(encoding="utf-8")
    for page in pages.glob("*.html"):
        assert_offline(page.read_text(encoding="utf-8"))
    # Again with one problem: the folder holds the new set only.
    problems.write_text(json.dumps({"id": "c", "text": EN}) + "\n", encoding="utf-8")
    assert main(["--model", str(model_dir), "--file", str(problems), "--explain-dir", str(pages)]) == 0
    assert sorted(p.name for p in pages.glob("*.html")) == ["0001-c.html", "index.html"]


def test_evaluate_explains_the_wrongly_solved_problems(model_dir, tmp_path, capsys):
    from hlgt.commands.evaluate import main
    from hlgt.train.evaluate import read_predictions

    out = tmp_path / "eval"
    assert main(["--model", str(model_dir), "--split", "test", "--out", str(out), "--explain-wrong", "3"]) == 0
    wrong = [p for p in read_predictions(out / "predictions_test.jsonl") if not p["value_correct"]]
    pages = sorted(p for p in (out / "explain_test").glob("*.html") if p.name != "index.html")
    assert len(pages) == min(3, len(wrong)) > 0
    for page, p in zip(pages, wrong):
        html = page.read_text(encoding="utf-8").replace("&nbsp;", " ")
        assert f"<h1>Problem {p['id']}</h1>" in html and "<b>model</b>" in html and "<b>gold</b>" in html
        assert '<b class="wrong">wrong</b>' in html
        assert html.count('<svg class="tree"') == 1 + (p["gold_prefix"] is not None)
    index = (out / "explain_test" / "index.html").read_text(encoding="utf-8")
    assert index.count('<g class="bar">') == 7 and "Table 4" in index
    for page in (out / "explain_test").glob("*.html"):
        assert_offline(page.read_text(encoding="utf-8"))
    assert "wrote" in capsys.readouterr().out


def test_evaluate_explain_needs_a_writable_out(tmp_path, capsys):
    from hlgt.commands.evaluate import main

    with pytest.raises(SystemExit):
        main(["--model", "m", "--explain-wrong", "3"])
    assert "give --out" in capsys.readouterr().err
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError):  # before the model is loaded: there is none
        main(["--model", "no/model", "--out", str(tmp_path / "f"), "--explain-wrong", "3"])


def test_report_draws_a_problem_from_its_raw_file(tmp_path, capsys):
    from hlgt.commands.report import main

    page = tmp_path / "p.html"
    assert main(["--dataset", "sample", "--id", "en-08", "--explain", str(page), "--graph", "parse"]) == 0
    assert "problem en-08 of sample" in capsys.readouterr().out
    edges = PageParts(page.read_text(encoding="utf-8")).edges
    assert edges and {e["data-type"] for e in edges} <= {"DEP", "BAE", "LES", "DT"}
    with pytest.raises(KeyError, match="no problem with id 'nope'"):
        main(["--dataset", "sample", "--id", "nope", "--explain", str(page)])
    with pytest.raises(FileNotFoundError, match="there is no folder"):  # before the files are read
        main(["--dataset", "sample", "--id", "nope", "--explain", str(tmp_path / "missing" / "p.html")])
    for argv, message in [(["--id", "en-08", "--explain", str(page)], "give one --dataset and its --id"),
                          (["--dataset", "sample", "--explain", str(page)], "give one --dataset and its --id"),
                          (["--dataset", "sample", "--id", "en-08"], "--id: only with --explain PAGE")]:
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err


# ---- in a browser ---------------------------------------------------------------------------------

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
STATUS = re.compile(r'<p id="script-status" data-state="(\w+)">([^<]*)</p>')
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium(tmp_path, page, *args) -> str:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    profile.mkdir()
    done = subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (Debian: apt-get install chromium): "
                                             "the page is not opened in a browser")
def test_the_page_runs_in_a_browser(model_dir, tmp_path):
    from hlgt.inference import load_model
    from hlgt.solve import explain_text, model_annotator, problem_row

    page = tmp_path / "page.html"
    explain_text(model_dir, ZH, page)
    _, flat = load_model(model_dir)
    graph = select_variant(Graph.from_lists(problem_row(ZH, None, model_annotator(flat, None))), flat["data.graph"])
    assert graph.num_nodes > 0 and graph.num_edges > 0
    dom = chromium(tmp_path, page, "--dump-dom")
    status = STATUS.search(dom)  # the script writes what it found in the drawing once it ran without an error
    assert status and status.groups() == ("ok", f"ok nodes={graph.num_nodes} edges={graph.num_edges}")
    drawn = PageParts(dom)  # the DOM as the browser holds it
    assert len(drawn.nodes) == graph.num_nodes and len(drawn.edges) == graph.num_edges
    chromium(tmp_path, page, "--window-size=1280,1800", f"--screenshot={tmp_path / 'page.png'}")
    assert (tmp_path / "page.png").stat().st_size > 10_000  # kept in the test's folder
    # An error in the script is caught and shown in the page.
    broken = tmp_path / "broken.html"
    broken.write_text(page.read_text(encoding="utf-8").replace('id="explain-data">{', 'id="explain-data">{oops'),
                      encoding="utf-8")
    status = STATUS.search(chromium(tmp_path, broken, "--dump-dom"))
    assert status and status.group(1) == "error" and "JSON" in status.group(2)
