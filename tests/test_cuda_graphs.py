"""Training steps replayed as CUDA graphs: the learned shape, the padded batches and the captured
module on the CPU; capture and replay where a GPU is."""
import copy
import dataclasses
import functools

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from hlgt import config as C
from hlgt import metrics as M
from hlgt.config import Config
from hlgt.data.collate import iter_batches
from hlgt.data.shards import load_rows, load_vocab
from hlgt.model.gru import Packing, Reversal
from hlgt.model.plan import Shape
from hlgt.model.solver import Solver
from hlgt.train import loop
from hlgt.train.cuda_graphs import TOKENS, GraphedSteps, _Bucket, _Captured, _graph_inputs

TINY = {"data.dataset": "sample", "train.epochs": 2, "train.lr_step": 1, "train.batch_size": 8,
        "model.embedding_size": 8, "model.hidden_size": 16, "model.heads": 2, "model.layers": 1,
        "model.beam_size": 2, "model.max_output_len": 16, "model.dropout": 0.0, "train.wandb": False,
        "train.threads": 1}

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from hlgt.data.build import ensure_shards

    return ensure_shards(Config.from_flat({**TINY, "data.shards_dir": str(tmp_path_factory.mktemp("processed"))}))


def _solver_and_rows(shards, **flat):
    cfg = Config.from_flat({**TINY, **flat})
    vocab = load_vocab(shards)
    torch.manual_seed(0)
    return Solver(cfg.model, vocab), vocab, [r for r in load_rows(shards, "train") if r["prefix"] is not None]


def test_shapes_learned_from_the_first_epochs_plans_pad_it_and_later_ones(shards):
    solver, vocab, rows = _solver_and_rows(shards)
    steps = GraphedSteps(solver)
    epochs = [list(iter_batches(rows, vocab, 8, shuffle=True, seed=e)) for e in (1, 2)]
    note = steps.learn(epochs[0])
    assert steps.buckets and note == f"cuda graphs: {len(steps.buckets)} shapes learned for the batches' depths"
    shapes = [b.shape for b in steps.buckets.values()]
    assert all(s is not None and s.problems == 8 for s in shapes)
    first = [steps.plan(b) for b in epochs[0]]
    assert all(p.plan.shape is not None for p in first if len(p) == 8)  # every full batch of it replays
    assert "grown" not in steps.epoch_note()
    second = [steps.plan(b) for b in epochs[1]]
    full = [p for p in second if len(p) == 8]
    assert all(p.plan.shape is None or any(p.plan.shape is s for s in shapes) for p in full)
    assert all(p.batch.tokens.size(1) == p.plan.shape.tokens and p.plan.trees.n_levels == len(p.plan.shape.tree.goals)
               for p in full if p.plan.shape is not None)
    assert sum(p.plan.shape is not None for p in full) >= len(full) // 2  # most of another shuffle fits
    assert all(p.plan.shape is None for p in second if len(p) < 8)  # the short last batch stays eager


def test_with_the_bigrus_batches_are_bucketed_by_their_longest_text_too(shards):
    solver, vocab, rows = _solver_and_rows(shards)
    batches = list(iter_batches(rows, vocab, 8, shuffle=True, seed=1))
    by_depth, steps = GraphedSteps(solver), GraphedSteps(solver, bigrus=True)
    by_depth.learn(batches)
    steps.learn(batches)
    assert all(t is None for _, t in by_depth.buckets) and all(t in TOKENS for _, t in steps.buckets)
    assert {d for d, _ in steps.buckets} == {d for d, _ in by_depth.buckets}
    for (_, bound), bucket in steps.buckets.items():  # padded to the bound, not a quarter past the longest
        assert bucket.shape.tokens == bound and bucket.seen.tokens <= bound
    for batch in batches:
        planned, packed = steps.plan(batch), by_depth.plan(batch)
        if planned.plan.shape is None:
            assert len(batch) < 8
            continue
        assert isinstance(planned.plan.packing, Reversal) and isinstance(packed.plan.packing, Packing)
        assert planned.batch.tokens.size(1) == planned.plan.shape.tokens == planned.plan.packing.index.size(1)
        assert _graph_inputs(planned)[-3:] == [planned.plan.packing.lengths, planned.plan.packing.index,
                                               planned.plan.packing.mask]


def test_a_batch_its_buckets_shape_cannot_hold_replays_in_the_least_shape_that_can(shards):
    solver, vocab, rows = _solver_and_rows(shards)
    steps = GraphedSteps(solver)
    batches = list(iter_batches(rows, vocab, 8))
    steps.learn(batches)
    batch = batches[0]
    key, own = steps._bucket_key(solver.plan(batch)), solver.shape_of(solver.plan(batch))
    roomy = functools.reduce(Shape.covering, [b.shape for b in steps.buckets.values()])
    roomier = dataclasses.replace(roomy, tokens=roomy.tokens + 8)
    steps.buckets[(99, None)] = _Bucket(seen=roomier, shape=roomier)
    steps.buckets[(98, None)] = _Bucket(seen=roomy, shape=roomy)
    bucket = steps.buckets[key]
    seen = bucket.seen
    bucket.shape = dataclasses.replace(own, tokens=own.tokens - 1)  # too short for this batch
    planned = steps.plan(batch)
    assert planned.plan.shape == roomy and planned.batch.tokens.size(1) == roomy.tokens
    assert bucket.seen == seen  # its bucket does not grow for it
    steps.buckets = {key: bucket}
    assert steps.plan(batch).plan.shape is None  # no shape holds it: eager


def test_a_shape_its_batches_outgrew_grows_at_the_epochs_end(shards):
    solver, vocab, rows = _solver_and_rows(shards)
    steps = GraphedSteps(solver)
    steps.learn(iter_batches(rows, vocab, 8))
    bucket = next(iter(steps.buckets.values()))
    too_small = dataclasses.replace(bucket.seen, tokens=bucket.seen.tokens - 1)
    bucket.shape = too_small  # as if the epoch's batches had been larger than the shape learned
    assert "1 of" in steps.epoch_note()
    assert bucket.seen.fits(bucket.shape) and bucket.shape != too_small and bucket.graphed is None
    assert "grown" not in steps.epoch_note()  # nothing outgrew it since


@pytest.mark.parametrize("bigrus", [False, True])
@pytest.mark.parametrize("arm", ["full", "gts"])
def test_the_captured_module_computes_the_solvers_losses(shards, arm, bigrus):
    # With the BiGRUs captured, from the batch's tensors alone: causal passes over a padded batch
    # give the losses of the batch packed as it is.
    solver, vocab, rows = _solver_and_rows(shards, **{k: v for k, v in C.ABLATIONS[arm].items()})
    batch = next(iter(iter_batches(rows, vocab, 8)))
    own = solver.plan(batch)
    shape = dataclasses.replace(solver.shape_of(own), tokens=batch.tokens.size(1) + 5)
    padded = solver.plan(batch, shape, causal=bigrus)
    states = () if bigrus else solver.encoder.recurrence(padded.batch, padded.plan.packing)
    module = _Captured(solver, padded, len(states))
    outs = module(*states, *_graph_inputs(padded))
    want = solver(own)
    with pytest.raises(ValueError, match="plan with a shape"):
        solver.plan(batch, causal=True)
    assert [o.item() for o in outs[:3]] == pytest.approx([want[k].item() for k in ("loss", "tree_loss", "com_loss")],
                                                         rel=1e-5)
    assert module.scale_names == list(want["scales"])


class _HostTensors(TorchDispatchMode):
    """Records every operator that is handed a tensor not on the meta device."""

    def __init__(self, seen: list[str]):
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(isinstance(t, torch.Tensor) and t.device.type != "meta" for t in tree_flatten((args, kwargs))[0]):
            self.seen.append(str(func))
        return func(*args, **kwargs)


class _HostData(TorchFunctionMode):
    """Records every tensor made from host data (which on a GPU is a copy from the host)."""

    FROM_DATA = (torch.tensor, torch.as_tensor, torch.asarray, torch.from_numpy)

    def __init__(self, seen: list[str]):
        super().__init__()
        self.seen = seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.FROM_DATA:
            self.seen.append(func.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("bigrus", [False, True])
@pytest.mark.parametrize("arm", [a for a, o in C.ABLATIONS.items()
                                 if o.get("model.encoder", "hlgt") in ("hlgt", "none")])
def test_the_captured_part_asks_nothing_of_the_host(shards, arm, bigrus):
    # What a capture forbids, or bakes in as the capture's values, a CPU can find on the meta
    # device, whose tensors have shapes but no values: reading a value back (.item(), nonzero,
    # a boolean mask) raises there, and a tensor made on the host (torch.tensor(list), a 0-dim CPU
    # tensor) reaches an operator beside meta ones or is made from host data (a copy from the
    # host, which a capture refuses). Forward and backward of every arm it captures.
    solver, vocab, rows = _solver_and_rows(shards, **C.ABLATIONS[arm], **{"model.dropout": 0.5})
    variant = Config.from_flat({**TINY, **C.ABLATIONS[arm]}).data.graph
    batch = next(iter(iter_batches(rows, vocab, 8, variant=variant)))
    padded = solver.plan(batch, solver.shape_of(solver.plan(batch)), causal=bigrus)
    states = () if bigrus else solver.encoder.recurrence(padded.batch, padded.plan.packing)
    meta = torch.device("meta")
    on_meta, batch_meta = copy.deepcopy(solver).to(meta), padded.to(meta)
    states_meta = [s.detach().to(meta).requires_grad_(s.requires_grad) for s in states]
    module = _Captured(on_meta, batch_meta, len(states_meta))
    host: list[str] = []
    with _HostData(host), _HostTensors(host):
        outs = module(*states_meta, *_graph_inputs(batch_meta))
        outs[0].backward()
    assert host == []
    assert outs[0].device == meta and any(p.grad is not None for p in on_meta.decoder.parameters())


@pytest.mark.parametrize("bigrus", [False, True])
@pytest.mark.parametrize("arm", ["full", "gts"])
@pytest.mark.usefixtures("stand_in_graphs")
def test_replayed_steps_feed_the_same_gradients_as_eager_ones(shards, arm, bigrus):
    # The captured part's inputs, outputs and gradients (to the BiGRUs' states and every
    # parameter) wired as make_graphed_callables wires them: training matches eager step by step.
    losses = {}
    for graphs in (False, True):
        solver, vocab, rows = _solver_and_rows(shards, **C.ABLATIONS[arm])
        opt = torch.optim.Adam(solver.parameters(), lr=1e-3)
        steps = GraphedSteps(solver, bigrus)
        batches = list(iter_batches(rows, vocab, 8))
        if graphs:
            steps.learn(batches)
        losses[graphs] = []
        for b in batches[:6]:
            out = steps.forward(steps.plan(b)) if graphs else solver(solver.plan(b))
            assert out["scales"] and not any(v.requires_grad for v in out["scales"].values())
            opt.zero_grad(set_to_none=True)
            out["loss"].backward()
            opt.step()
            losses[graphs].append(out["loss"].detach())  # read after the loop, as the bench does
        losses[graphs] = [x.item() for x in losses[graphs]]
        if graphs:
            assert "6 batches replayed" in steps.epoch_note()
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)


def test_cuda_graphs_need_a_gpu(shards, tmp_path):
    with pytest.raises(ValueError, match="train.cuda_graphs captures CUDA graphs: it needs a GPU"):
        loop.train(Config.from_flat({**TINY, "train.cuda_graphs": True}), shards, run_dir=tmp_path / "run")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("arm", ["full", "gts"])
def test_replayed_steps_train_as_eager_steps_do(shards, tmp_path, arm):
    # Dropout 0: the same losses epoch by epoch up to float rounding (padding changes no loss).
    runs = {}
    for graphs in (False, True):
        cfg = Config.from_flat({**TINY, **C.ABLATIONS[arm], "train.epochs": 3, "train.use_gpu": True,
                                "train.cuda_graphs": graphs})
        result = loop.train(cfg, shards, run_dir=tmp_path / f"run-{graphs}",
                            runtime=loop.Runtime(device=torch.device("cuda")))
        runs[graphs] = [m[M.TRAIN_LOSS] for m in result.history]
    assert runs[True] == pytest.approx(runs[False], rel=1e-3)


def test_cuda_graphs_leave_the_hgt_and_rgat_baselines_out(shards, tmp_path):
    with pytest.raises(ValueError, match="hlgt and none encoders only"):
        loop.train(Config.from_flat({**TINY, "train.cuda_graphs": True, "model.encoder": "rgat"}), shards,
                   run_dir=tmp_path / "run")


def test_a_failed_capture_leaves_every_later_step_eager(shards, monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", refuse)
    solver, vocab, rows = _solver_and_rows(shards)
    steps = GraphedSteps(solver)
    batches = list(iter_batches(rows, vocab, 8))
    steps.learn(batches)
    padded = steps.plan(batches[0])
    assert padded.plan.shape is not None
    out = steps.forward(padded)
    states = solver.encoder.recurrence(padded.batch, padded.plan.packing)
    assert out["loss"].item() == pytest.approx(solver.after_recurrence(padded, states)["loss"].item(), rel=1e-5)
    steps.forward(steps.plan(batches[1]))
    assert steps.epoch_note() == ("cuda graphs: 0 batches replayed, 2 eager; capture failed, every step eager: "
                                  "operation not permitted when stream is capturing")


@pytest.mark.usefixtures("stand_in_graphs")
def test_a_failed_capture_with_the_bigrus_leaves_them_eager_and_the_rest_replayed(shards, monkeypatch):
    stand_in = torch.cuda.make_graphed_callables

    def refuse_the_bigrus(module, sample_args, allow_unused_input=False):
        if module.n_states == 0:
            raise RuntimeError("operation not permitted when stream is capturing\nmore")
        return stand_in(module, sample_args, allow_unused_input)

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", refuse_the_bigrus)
    solver, vocab, rows = _solver_and_rows(shards)
    steps = GraphedSteps(solver, bigrus=True)
    batches = list(iter_batches(rows, vocab, 8))
    steps.learn(batches)
    ahead = steps.plan(batches[1])  # planned before the failure, laid out for the causal passes
    first = steps.plan(batches[0])
    out = steps.forward(first)  # its capture fails: eager
    assert out["loss"].item() == pytest.approx(solver(solver.plan(batches[0]))["loss"].item(), rel=1e-5)
    assert isinstance(ahead.plan.packing, Reversal) and steps.forward(ahead)["loss"].requires_grad  # eager
    later = [steps.plan(b) for b in batches[2:6]]
    assert all(isinstance(p.plan.packing, Packing) and p.plan.shape is not None for p in later)
    for p in later:
        steps.forward(p)
    assert steps.epoch_note().startswith("cuda graphs: 4 batches replayed, 2 eager; capturing the BiGRUs failed, "
                                         "they run eagerly: operation not permitted when stream is capturing")


def test_bench_times_the_replayed_steps_after_learning_and_capturing(shards, stand_in_graphs):
    from hlgt.train.bench import measure

    cfg = Config.from_flat({**TINY, "train.cuda_graphs": True, "model.beam_size": 1})
    solver, vocab, rows = _solver_and_rows(shards)
    r = measure(cfg, rows[:64], rows[64:72], vocab, torch.device("cpu"))
    # The timed pass: every full batch replayed (shapes learned and captured before it), and
    # no batch of 8 left short.
    assert r["note"] == "cuda graphs: 7 batches replayed, 0 eager" and r["train_problems"] == 56
    assert r["train_loss"] > 0
    # The pass before it captured each shape once; its time beyond the timed pass's (scaled
    # to its 8 batches) is shared among them.
    assert r["captures"] == len(stand_in_graphs) > 0 and r["capture_pass_s"] > 0
    replayed_s = r["capture_pass_s"] - r["captures"] * r["capture_s_each"]
    assert replayed_s == pytest.approx(8 * 56 / r["train_problems_per_s"] / 7)


def test_bench_measures_no_capture_without_cuda_graphs(shards):
    from hlgt.train.bench import measure

    solver, vocab, rows = _solver_and_rows(shards)
    r = measure(Config.from_flat({**TINY, "model.beam_size": 1}), rows[:64], rows[64:72], vocab, torch.device("cpu"))
    assert "captures" not in r and "capture_s_each" not in r and r["note"] == ""


@pytest.mark.parametrize("bigrus", [False, True])
@pytest.mark.usefixtures("stand_in_graphs")
def test_training_with_replayed_steps_matches_eager_training(shards, tmp_path, bigrus):
    # The whole loop (plan, move, replay, backward, Adam, epoch logs) with the graphs stood in.
    losses, logs = {}, []
    for graphs in (False, True):
        cfg = Config.from_flat({**TINY, "train.epochs": 3, "train.cuda_graphs": graphs,
                                "train.capture_bigrus": graphs and bigrus})
        result = loop.train(cfg, shards, run_dir=tmp_path / f"run-{graphs}", runtime=loop.Runtime(log=logs.append))
        losses[graphs] = [m[M.TRAIN_LOSS] for m in result.history]
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)
    notes = [m for m in logs if m.startswith("cuda graphs:")]
    assert len(notes) == 1 + 3 and "shapes learned" in notes[0]
    # From the first epoch on, every full batch replays; the short last batch runs eagerly.
    _, _, rows = _solver_and_rows(shards)
    full, short = divmod(len(rows), 8)
    assert notes[1].startswith(f"cuda graphs: {full} batches replayed, {int(short > 0)} eager")
    assert all(" 0 batches replayed" not in n for n in notes[2:])
