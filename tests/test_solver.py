"""Solver: losses, comparison head, solving, save/load, overfitting a few problems, bad input."""
from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hlgt.config import ModelConfig
from hlgt.data.collate import collate
from hlgt.data.graph import Graph, line_graph
from hlgt.data.numbers import Example, Quantity
from hlgt.data.schema import to_row
from hlgt.data.vocab import Vocab
from hlgt.expr import OPS, ExprError, eval_prefix, values_match
from hlgt.metrics import ACTIVATIONS, MODEL_PARTS
from hlgt.model.comparison import Comparison
from hlgt.model.solver import Solver

WORDS = [f"w{i}" for i in range(60)]
VOCAB = Vocab.build([WORDS], constants=["1", "100"])
SMALL = dict(embedding_size=16, hidden_size=32, heads=4, layers=1, dropout=0.1, beam_size=3, max_output_len=15)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def random_prefix(rng: random.Random, leaves: list[str], max_ops: int) -> list[str]:
    def build(k):
        if k == 0:
            return [rng.choice(leaves)]
        left = rng.randint(0, k - 1)
        return [rng.choice(OPS[:4])] + build(left) + build(k - 1 - left)

    return build(rng.randint(0, max_ops))


def make_rows(n: int, seed: int, max_ops: int = 3) -> list[dict]:
    """Inline problems: random words, 1-4 integer quantities, a random gold prefix and its answer;
    the graph: one node per quantity and two word nodes, a chain of edges both ways."""
    rng = random.Random(seed)
    rows = []
    while len(rows) < n:
        length = rng.randint(6, 14)
        tokens = [rng.choice(WORDS) for _ in range(length)]
        positions = sorted(rng.sample(range(length), rng.randint(1, 4)))
        values = [float(rng.randint(1, 60)) for _ in positions]
        for p, v in zip(positions, values):
            tokens[p] = str(int(v))
        prefix = random_prefix(rng, VOCAB.constants + [f"N{i}" for i in range(len(positions))], max_ops)
        try:
            answer = float(eval_prefix(prefix, values))
        except ExprError:
            continue
        words = [p for p in range(length) if p not in positions][:2]
        node_pos = np.array(positions + words)
        node_type = np.array([6] * len(positions) + [0] * len(words))
        src = np.arange(len(node_pos) - 1)
        edge_src, edge_dst = np.concatenate([src, src + 1]), np.concatenate([src + 1, src])
        ls, ld = line_graph(edge_src, edge_dst)
        graph = Graph(node_pos=node_pos, node_type=node_type, edge_src=edge_src, edge_dst=edge_dst,
                      edge_type=np.array([rng.randrange(10) for _ in edge_src]), edge_part=np.zeros(len(edge_src), int),
                      line_src=ls, line_dst=ld)
        quantities = [Quantity(str(int(v)), v, "integer", p) for p, v in zip(positions, values)]
        example = Example(id=f"p{len(rows)}", lang="en", source="inline", tokens=tokens, quantities=quantities,
                          prefix=prefix, answer=answer)
        rows.append(to_row(example, graph))
    return rows


def solver(seed=0, **kw) -> Solver:
    torch.manual_seed(seed)
    return Solver(ModelConfig(**{**SMALL, **kw}), VOCAB)


def parses(tokens: list[str], n_quantities: int) -> bool:
    need = 1
    for t in tokens:
        if need == 0:
            return False
        if t in OPS:
            need += 1
        elif t in VOCAB.constants or (t.startswith("N") and int(t[1:]) < n_quantities):
            need -= 1
        else:
            return False
    return need == 0


@pytest.mark.parametrize("encoder", ["none", "hlgt"])
def test_forward_losses(encoder):
    model = solver(encoder=encoder)
    batch = collate(make_rows(5, 1), VOCAB)
    out = model(batch)
    scales = out.pop("scales")
    assert set(out) == {"loss", "tree_loss", "com_loss"}
    assert all(v.shape == () and torch.isfinite(v) for v in out.values())
    # Activation scales: the std over real tokens, detached; h_seq and h_str are the halves of h_f.
    assert set(scales) == ({"h_b", "memory"} if encoder == "none" else {"h_b", "h_seq", "h_str", "memory"})
    assert set(scales) <= set(ACTIVATIONS) and not any(v.requires_grad for v in scales.values())
    model.eval()
    enc = model.encoder(batch)
    scales = model(batch)["scales"]
    assert scales["h_b"].item() == pytest.approx(enc.h_b[enc.mask].std().item(), rel=1e-4)
    if encoder != "none":
        assert scales["h_str"].item() == pytest.approx(enc.h_f[..., 32:][enc.mask].std().item(), rel=1e-4)
    model.train()
    out = model(batch)
    assert torch.allclose(out["loss"], out["tree_loss"] + model.cfg.beta_com * out["com_loss"])
    assert out["com_loss"] > 0
    out["loss"].backward()
    assert model.comparison.U.grad.abs().sum() > 0 and model.decoder.generate.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("kw", [dict(encoder="none", aux_task=False), dict(encoder="hlgt"), dict(encoder="rgat")])
def test_parts_hold_every_parameter_once(kw):
    model = solver(**kw)
    parts = model.parts()
    assert list(parts) == [p for p in MODEL_PARTS if p in parts]
    held = [id(p) for ps in parts.values() for p in ps]
    assert sorted(held) == sorted(id(p) for p in model.parameters())
    assert ("graph" in parts) == (kw["encoder"] != "none")


def test_no_aux_task_zero_weights_the_comparison():
    model = solver(aux_task=False, encoder="none")
    assert model.comparison is None
    out = model(collate(make_rows(4, 2), VOCAB))
    assert out["com_loss"].item() == 0.0 and out["loss"].item() == out["tree_loss"].item()
    with_aux = solver(aux_task=True, encoder="none")
    with_aux.load_state_dict(model.state_dict(), strict=False)  # same encoder and decoder weights
    model.eval(), with_aux.eval()
    batch = collate(make_rows(4, 2), VOCAB)
    assert torch.allclose(model(batch)["tree_loss"], with_aux(batch)["tree_loss"])


def test_comparison_labels_and_loss():
    values = torch.tensor([[3.0, 1.0, 3.00001, 0.0]])
    labels = Comparison.labels(values)[0]
    assert labels.tolist() == [[1, 1, 1, 1], [0, 1, 0, 1], [1, 1, 1, 1], [0, 0, 0, 1]]
    head = Comparison(6, 4, init="uniform")
    with torch.no_grad():
        head.U.zero_()
        head.linear.weight.zero_()
        head.linear.bias.zero_()
    h_f, h_b = torch.randn(2, 5, 6), torch.randn(2, 5, 4)
    num_pos = torch.tensor([[0, 2, 4], [1, 0, 0]])
    num_mask = torch.tensor([[True, True, True], [False, False, False]])  # the second problem has no quantity
    loss = head.loss(h_f, h_b, num_pos, num_mask, torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]))
    assert abs(loss.item() - np.log(2)) < 1e-6  # p = 1/2 on every pair of the one problem that counts
    # the biaffine form of eq. 8, pair by pair
    head.reset_parameters()
    logits = head(h_f, h_b, num_pos)
    for i, j in [(0, 1), (2, 0), (1, 1)]:
        qi, qj = num_pos[0, i], num_pos[0, j]
        u_s = head.U / 6  # stored as F * U_s
        manual = h_f[0, qi] @ u_s @ h_f[0, qj] + head.linear(torch.cat([h_b[0, qi], h_b[0, qj]]))[0]
        assert torch.allclose(logits[0, i, j], manual, atol=1e-5)
    # nn.Bilinear's draw of U_s itself: ±1/sqrt(F)
    assert 0.3 < (head.U / 6).abs().max().item() <= 1 / np.sqrt(6)


def test_one_adam_step_moves_a_comparison_logit_as_a_linear_layer_would():
    """Stored as F * U_s, the biaffine term's first Adam step over F = 1024 unit-scale features
    moves the logits by about lr * F, not lr * F^2 (as a plain U_s does)."""
    torch.manual_seed(0)
    head = Comparison(1024, 4, init="zeros")
    h_f, h_b = torch.randn(1, 4, 1024), torch.zeros(1, 4, 4)
    num_pos, num_mask = torch.tensor([[0, 1, 2, 3]]), torch.ones(1, 4, dtype=torch.bool)
    opt = torch.optim.Adam([head.U], lr=1e-3)
    head.loss(h_f, h_b, num_pos, num_mask, torch.tensor([[1.0, 2.0, 3.0, 4.0]])).backward()
    opt.step()
    assert 0.1 < head(h_f, h_b, num_pos).abs().max() < 5.0  # moved, by about lr * F = 1


def test_comparison_zero_init_starts_at_one_half_and_learns():
    head = Comparison(6, 4, init="zeros")
    h_f, h_b = torch.randn(1, 5, 6), torch.randn(1, 5, 4)
    num_pos, num_mask = torch.tensor([[0, 2, 4]]), torch.tensor([[True, True, True]])
    assert head(h_f, h_b, num_pos).abs().max() == 0  # every pair starts at p = 1/2
    loss = head.loss(h_f, h_b, num_pos, num_mask, torch.tensor([[1.0, 2.0, 3.0]]))
    assert abs(loss.item() - np.log(2)) < 1e-6
    loss.backward()
    assert head.U.grad.abs().sum() > 0 and head.linear.weight.grad.abs().sum() > 0
    assert Comparison(6, 4, init="uniform").U.abs().sum() > 0  # nn.Bilinear's draw
    with pytest.raises(ValueError, match="comparison_init"):
        Comparison(6, 4, init="xavier")
    assert solver(encoder="hlgt", aux_task=True).comparison.U.abs().sum() == 0  # the default
    assert solver(encoder="hlgt", aux_task=True, comparison_init="uniform").comparison.U.abs().sum() > 0


def test_batched_equals_separate():
    model = solver(encoder="hlgt").eval()
    rows = make_rows(3, 3)
    batch = collate(rows, VOCAB)
    out = model(batch)
    n_tokens = batch.target_mask.sum(1).float()
    together = out["tree_loss"] * n_tokens.sum()
    alone = [model(collate([r], VOCAB)) for r in rows]
    assert torch.allclose(together, sum(a["tree_loss"] * n for a, n in zip(alone, n_tokens)), atol=1e-4)
    assert model.solve(batch) == sum((model.solve(collate([r], VOCAB)) for r in rows), [])
    assert model.solve(batch, beam_batch=2) == model.solve(batch)  # beam search in slices of 2 and 1


def test_beam_slices_on_parallel_threads_match_one_thread():
    from hlgt.model import solver as solver_module

    model = solver(encoder="none").eval()
    batch = collate(make_rows(9, 3), VOCAB)
    threads = torch.get_num_threads()
    calls = []
    real = solver_module.ThreadPoolExecutor

    class Recording(real):
        def __init__(self, max_workers):
            calls.append(max_workers)
            super().__init__(max_workers=max_workers)

    try:
        torch.set_num_threads(1)
        alone = model.solve(batch, beam_batch=2)
        torch.set_num_threads(3)
        solver_module.ThreadPoolExecutor = Recording
        together = model.solve(batch, beam_batch=2)  # five slices, three at a time
        assert torch.get_num_threads() == 3  # restored after the searches
    finally:
        solver_module.ThreadPoolExecutor = real
        torch.set_num_threads(threads)
    assert together == alone and calls == [3]


@pytest.mark.parametrize("encoder", ["none", "hlgt"])
def test_solve_returns_valid_prefixes(encoder):
    rows = make_rows(24, 4)
    batch = collate(rows, VOCAB)
    for seed in range(2):
        model = solver(seed, encoder=encoder)
        model.train()
        for beam, bf16 in ((1, False), (3, False), (3, True)):
            out = model.solve(batch, beam_size=beam, bf16_inference=bf16)
            assert model.training  # solve restores the mode
            assert len(out) == len(rows)
            for tokens, row in zip(out, rows):
                assert parses(tokens, len(row["num_pos"])) and len(tokens) <= SMALL["max_output_len"], tokens
    with pytest.raises(ValueError, match="beam_size"):
        model.solve(batch, beam_size=0)
    with pytest.raises(ValueError, match="beam_batch"):
        model.solve(batch, beam_batch=0)


def test_bf16_inference_is_the_calls_setting_over_the_configs(monkeypatch):
    """A caller decodes in bfloat16 (or not) without writing into the model's config."""
    batch = collate(make_rows(3, 5), VOCAB)
    for configured in (False, True):
        model = solver(encoder="none", bf16_inference=configured)
        seen = []
        forward = model.encoder.forward
        monkeypatch.setattr(model.encoder, "forward",
                            lambda b, low_precision=False: seen.append(low_precision) or forward(b, low_precision))
        model.solve(batch)
        model.solve(batch, bf16_inference=not configured)
        assert seen == [configured, not configured] and model.cfg.bf16_inference is configured


def test_even_step_cuts_evenly():
    from hlgt.model.solver import even_step

    assert [even_step(n, 64) for n in (1, 64, 65, 200, 256, 257)] == [1, 64, 33, 50, 64, 52]


def test_save_load_same_predictions(tmp_path):
    model = solver(encoder="hlgt", aux_task=True)
    batch = collate(make_rows(8, 5), VOCAB)
    model.save(tmp_path / "m", extra={"epoch": 3, "data.graph": "srl"})
    flat = json.loads((tmp_path / "m" / "config.json").read_text())
    assert flat["epoch"] == 3 and flat["model.hidden_size"] == 32 and flat["model.encoder"] == "hlgt"
    assert set(torch.load(tmp_path / "m" / "model.pt", weights_only=True)) == set(model.state_dict())
    loaded = Solver.load(tmp_path / "m")
    assert loaded.cfg == model.cfg and loaded.vocab.to_dict() == VOCAB.to_dict()
    assert loaded.solve(batch) == model.solve(batch)
    model.eval(), loaded.eval()
    assert model(batch)["loss"].item() == loaded(batch)["loss"].item()
    with pytest.raises(ValueError, match="clash"):
        model.save(tmp_path / "x", extra={"model.hidden_size": 8})
    with pytest.raises(FileNotFoundError, match="missing"):
        Solver.load(tmp_path / "nothing")
    del flat["weights_format"]  # a folder saved before the format was recorded
    (tmp_path / "m" / "config.json").write_text(json.dumps(flat))
    with pytest.raises(ValueError, match="format 1.*retrain"):
        Solver.load(tmp_path / "m")


def test_bad_targets_are_named():
    model = solver(encoder="none")
    rows = make_rows(3, 6)
    rows[1] = {**rows[1], "prefix": None}
    with pytest.raises(ValueError, match=r"\['p1'\] have no gold"):
        model(collate(rows, VOCAB))
    rows = make_rows(3, 6)
    rows[2] = {**rows[2], "prefix": ["+", "N0", "N7"]}
    with pytest.raises(ValueError, match=r"\['p2'\].*outside"):
        model(collate(rows, VOCAB))
    rows = make_rows(3, 6)
    rows[0] = {**rows[0], "prefix": ["+", "N0"]}
    with pytest.raises(ValueError, match="not complete prefix"):
        model(collate(rows, VOCAB))


def accuracy(model: Solver, rows) -> tuple[float, float]:
    predictions = model.solve(collate(rows, VOCAB))
    equation = value = 0
    for p, row in zip(predictions, rows):
        equation += p == list(row["prefix"])
        try:
            value += values_match(float(eval_prefix(p, row["num_values"])), row["answer"])
        except ExprError:
            pass
    return equation / len(rows), value / len(rows)


@pytest.mark.parametrize("encoder", ["none", pytest.param("hlgt", marks=pytest.mark.slow)])
def test_overfits_32_problems(encoder):
    torch.manual_seed(0)
    model = Solver(ModelConfig(**{**SMALL, "hidden_size": 64, "dropout": 0.0, "encoder": encoder}), VOCAB)
    rows = make_rows(32, 7)
    batch = collate(rows, VOCAB)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(400):
        out = model(batch)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
        if out["tree_loss"].item() < 1e-3:
            break
    assert accuracy(model, rows) == (1.0, 1.0)


@pytest.mark.parametrize("kw", [{}, {"encoder": "none"}, {"node_type": False}, {"line_graph": False},
                                {"aux_task": False}])
@pytest.mark.parametrize("max_ops", [0, 1, 3])
def test_every_parameter_gets_a_gradient(kw, max_ops):
    """What lets data-parallel training skip DDP's search for unused parameters: also a batch
    without any operator (no GenerateNode, no right goal) or without nested ones (no Merge)."""
    model = solver(**kw)
    assert model.uses_every_parameter
    batch = collate(make_rows(3, 7, max_ops=max_ops), VOCAB)
    out = model(batch)
    out["loss"].backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []
    model.eval()  # no dropout: the same loss with the tie (autograd on) and without it (off)
    with torch.no_grad():
        untied = model(batch)["loss"]
    torch.testing.assert_close(model(batch)["loss"].detach(), untied)


def test_a_planned_batch_moves_in_one_transfer_per_dtype():
    # To a GPU every separate copy makes the host wait: the batch, its tree layout and its graph
    # layout travel as one buffer per dtype, and arrive as views of it.
    from hlgt.tensors import packed_to, tensors_of

    planned = solver(encoder="hlgt").plan(collate(make_rows(4, 5), VOCAB))
    moved = planned.to("meta")
    tensors, arrived = tensors_of(planned), tensors_of(moved)
    plan, moved_plan = planned.plan, moved.plan
    assert len(arrived) == len(tensors) and moved_plan.trees.goal_node.is_meta and moved_plan.graph.groups.perm.is_meta
    assert all(m.is_meta and m.shape == t.shape and m.dtype == t.dtype for t, m in zip(tensors, arrived))
    assert len({id(m._base) for m in arrived}) == len({t.dtype for t in tensors})
    assert moved.batch.checked and moved_plan.graph.groups.counts == plan.graph.groups.counts
    assert moved_plan.trees.goal_starts == plan.trees.goal_starts
    parts = [torch.arange(6).view(2, 3), torch.zeros(0, dtype=torch.long), torch.tensor([7])]
    assert all(torch.equal(a, b) for a, b in zip(packed_to(parts, torch.device("cpu")), parts))
    assert planned.to("cpu").batch.tokens is planned.batch.tokens  # already there: not copied


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_planned_training_step_on_the_gpu_never_waits_for_it():
    # Everything that reads values is made by plan() on the CPU; the step itself (forward,
    # backward, gradient norms, fused Adam) must not synchronise, and must compute the CPU's losses.
    from hlgt.config import Config
    from hlgt.train.step import EpochStats, make_optimizer

    model = solver(encoder="hlgt")
    batch = model.plan(collate(make_rows(6, 3), VOCAB))
    model.eval()
    on_cpu = model(batch)
    model.cuda()
    moved = batch.to("cuda")
    assert (moved.plan.packing.fwd_src.is_cuda and moved.plan.graph.touched.is_cuda
            and moved.plan.trees.goal_node.is_cuda)
    opt, _ = make_optimizer(Config.from_flat({}), model)
    stats = EpochStats(model.parts(), torch.device("cuda"))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = model(moved)
        opt.zero_grad(set_to_none=True)
        out["loss"].backward()
        stats.step(out, len(moved))
        opt.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for key in ("loss", "tree_loss", "com_loss"):
        torch.testing.assert_close(out[key].cpu(), on_cpu[key], atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_compiled_parts_give_the_eager_losses_and_gradients_and_a_copy_runs_its_own_weights():
    import copy

    eager = solver(encoder="hlgt", dropout=0.0)  # no dropout: the compiler draws its own masks
    compiled = copy.deepcopy(eager)
    compiled.compile_parts()
    for seed in (3, 4):  # batches of different shapes: dynamic sizes, no new graphs per batch
        batch = eager.plan(collate(make_rows(6, seed, max_ops=4), VOCAB))
        outs = [model(batch) for model in (eager, compiled)]
        for key in ("loss", "tree_loss", "com_loss"):
            torch.testing.assert_close(outs[1][key], outs[0][key], atol=1e-5, rtol=1e-5)
        grads = [torch.autograd.grad(out["loss"], list(model.parameters()), allow_unused=True)
                 for out, model in zip(outs, (eager, compiled))]
        for (name, _), g, cg in zip(eager.named_parameters(), *grads):
            assert (g is None) == (cg is None), name
            if g is not None:
                torch.testing.assert_close(cg, g, atol=1e-5, rtol=1e-4, msg=name)
    kept = copy.deepcopy(compiled)  # as the training loop keeps its best model
    with torch.no_grad():
        kept.decoder.goal_left.weight.add_(1.0)
        kept.encoder.graph.edge_embedding.weight.add_(1.0)
        assert not torch.allclose(kept(batch)["tree_loss"], compiled(batch)["tree_loss"])
        torch.testing.assert_close(compiled(batch)["tree_loss"], outs[1]["tree_loss"])


def test_batches_planned_before_the_step_give_the_same_losses():
    # The training loop lays the gold trees and the graph out on the CPU (a GPU step would wait
    # for their sizes).
    model = solver(encoder="hlgt")
    model.eval()  # no dropout: the two passes must agree exactly
    batch = collate(make_rows(6, 3), VOCAB)
    plain = model(batch)
    planned = model.plan(batch)
    moved = planned.to("cpu")
    assert moved.batch.checked and None not in (moved.plan.trees, moved.plan.graph, moved.plan.packing)
    assert torch.equal(moved.plan.graph.touched, torch.unique(batch.edge_index))
    assert solver(encoder="none").plan(collate(make_rows(2, 3), VOCAB)).plan.graph is None
    ahead = model(moved)
    for key in ("loss", "tree_loss", "com_loss"):
        assert torch.equal(plain[key], ahead[key])
    # The targets' checks run there too, and name the problem.
    rows = make_rows(3, 4)
    rows[1] = {**rows[1], "prefix": None}
    with pytest.raises(ValueError, match=r"problems \['p1'\] have no gold equation"):
        model.plan(collate(rows, VOCAB))


def _planned(model: Solver, rows: list[dict], shape=None):
    return model.plan(collate(rows, VOCAB), shape)


def _losses_and_gradients(model: Solver, batch) -> tuple[list[float], dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    out = model(batch)
    out["loss"].backward()
    return [out["tree_loss"].item(), out["com_loss"].item()], {n: p.grad for n, p in model.named_parameters()}


def _covering(model: Solver, *row_sets):
    shapes = [model.shape_of(_planned(model, rows)) for rows in row_sets]
    shape = shapes[0]
    for other in shapes[1:]:
        shape = shape.covering(other)
    return shape


@pytest.mark.parametrize("kw", [dict(encoder="hlgt"), dict(encoder="hlgt", node_type=False), dict(encoder="none")])
def test_a_batch_padded_to_a_shape_has_the_unpadded_losses_and_gradients(kw):
    model = solver(**{**kw, "dropout": 0.0, "layers": 2})
    rows, deeper = make_rows(6, 3), make_rows(6, 4, max_ops=6)  # the other batch: more nodes, deeper trees
    shape = _covering(model, rows, deeper)
    assert shape != model.shape_of(_planned(model, rows))  # the batch does get padded
    losses, grads = _losses_and_gradients(model, _planned(model, rows))
    padded_losses, padded_grads = _losses_and_gradients(model, _planned(model, rows, shape))
    assert padded_losses == pytest.approx(losses, rel=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(padded_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def _operator_shapes(model: Solver, batch) -> list[tuple[str, str]]:
    """Each aten operator of a training step (forward and backward) with the shapes of its
    inputs, in order."""
    from torch.profiler import ProfilerActivity, profile

    model.zero_grad(set_to_none=True)  # each step accumulates into fresh gradients
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        model(batch)["loss"].backward()
    return [(e.name, str(e.input_shapes)) for e in prof.events() if e.name.startswith("aten::")]


def _stand_in_bigru(gru, x, lengths, low_precision=False, packing=None):
    """One product in place of a BiGRU, with its output shapes: the BiGRUs run over each batch's
    own lengths, outside a captured graph."""
    h = F.linear(x, gru.weight_ih_l0[: gru.hidden_size])  # [B, T, H]
    return h, h[:, 0].expand(2 * gru.num_layers, -1, -1)


@pytest.mark.parametrize("encoder", ["hlgt", "none"])
def test_batches_padded_to_one_shape_run_the_same_operators_on_the_same_shapes(encoder, monkeypatch):
    # What one CUDA graph needs to serve every batch: the step after the BiGRUs is the same
    # sequence of operators on the same shapes, whatever the problems.
    monkeypatch.setattr("hlgt.model.encoder.bigru", _stand_in_bigru)
    model = solver(encoder=encoder, layers=2)
    first, second = make_rows(6, 3), make_rows(6, 4, max_ops=6)
    shape = _covering(model, first, second)
    padded = [_operator_shapes(model, _planned(model, rows, shape)) for rows in (first, second)]
    assert padded[0] == padded[1]
    unpadded = [_operator_shapes(model, _planned(model, rows)) for rows in (first, second)]
    assert unpadded[0] != unpadded[1]


def test_a_shape_too_small_for_a_batch_is_an_error():
    model = solver(encoder="hlgt")
    rows = make_rows(6, 3)
    own = model.shape_of(_planned(model, rows))
    assert own.fits(own) and own.fits(_covering(model, rows, make_rows(6, 4, max_ops=6)))
    for smaller in (dataclasses.replace(own, tokens=own.tokens - 1), dataclasses.replace(own, edges=own.edges - 2)):
        assert not own.fits(smaller)
        with pytest.raises(ValueError, match="cannot pad a batch"):
            _planned(model, rows, smaller)
    with pytest.raises(ValueError, match="exceed the group sizes"):
        _planned(model, rows, dataclasses.replace(own, groups=(own.groups[0] - 1, *own.groups[1:])))
    shallow = dataclasses.replace(own, tree=dataclasses.replace(own.tree, goals=own.tree.goals[:-1]))
    with pytest.raises(ValueError, match="do not fit"):
        _planned(model, rows, shallow)
    with pytest.raises(ValueError, match="a batch of 5 problems cannot be padded to 6"):
        _planned(model, rows[:5], own)


@pytest.mark.parametrize("name, content, fault", [
    ("model.pt", b"PK\x03\x04 cut short", r"cannot load .*model\.pt: "),
    ("vocab.json", b'{"words": 5}', r"vocab\.json is damaged: a vocabulary is an object with 'words' and 'outputs'"),
    ("vocab.json", b'{"words": ["a"]}', r"vocab\.json is damaged: a vocabulary"),
    ("config.json", b"", r"config\.json is damaged: Expecting value"),
    ("config.json", b"[1]", r"config\.json is damaged: a JSON object expected, not list"),
])
def test_a_damaged_model_folder_names_the_file(tmp_path, name, content, fault):
    solver(encoder="none").save(tmp_path / "m")
    (tmp_path / "m" / name).write_bytes(content)
    with pytest.raises(ValueError, match=fault):
        Solver.load(tmp_path / "m")


def test_weights_of_other_sizes_than_the_config_name_the_first_mismatch(tmp_path):
    solver(encoder="none").save(tmp_path / "m")
    flat = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**flat, "model.hidden_size": 16}))
    with pytest.raises(ValueError, match=r"model\.pt: size mismatch for "):
        Solver.load(tmp_path / "m")
