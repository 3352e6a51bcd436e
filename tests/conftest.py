"""Fixtures and markers shared by several test modules."""
import pytest
import torch

from hlgt.data.splits import resolve_data_dir


@pytest.fixture(autouse=True)
def no_wandb_key(monkeypatch, tmp_path_factory):
    """No test reads the developer's W&B key (its file, ``~/.hlgt/wandb_api_key``, or a variable
    set in the shell) or leaves one set (loading the key file sets ``WANDB_API_KEY``): W&B's mode
    would turn online. Tests of the key set their own."""
    monkeypatch.setenv("HLGT_WANDB_KEY_FILE", str(tmp_path_factory.getbasetemp() / "no-wandb-key"))
    monkeypatch.setenv("WANDB_API_KEY", "")  # recorded as unset, so that teardown unsets it
    monkeypatch.delenv("WANDB_API_KEY")


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread, and CI's 2 cores may be busy with Ray processes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A model folder (``<run>/best``) trained briefly on the sample data, shared by the tests of
    the commands that read one (solve, evaluate)."""
    # Imported here: every test session loads this file, most of them never train.
    from hlgt.config import Config
    from hlgt.data.build import ensure_shards
    from hlgt.train import loop

    cfg = Config.from_flat({"data.dataset": "sample", "train.epochs": 2, "train.lr_step": 1, "train.batch_size": 16,
                            "model.embedding_size": 8, "model.hidden_size": 16, "model.heads": 2, "model.layers": 1,
                            "model.beam_size": 2, "model.max_output_len": 16, "train.wandb": False,
                            "train.threads": 1, "data.shards_dir": str(tmp_path_factory.mktemp("processed"))})
    run = tmp_path_factory.mktemp("run")
    loop.train(cfg, ensure_shards(cfg), run_dir=run)
    return run / "best"


@pytest.fixture(scope="session")
def real_data():
    """The real benchmark files (``$HLGT_DATA_DIR`` or ../shared/datasets); tests that read them
    carry ``@pytest.mark.realdata`` and are skipped when the folder is absent."""
    return resolve_data_dir(None)


def pytest_collection_modifyitems(config, items):
    real = resolve_data_dir(None)
    if real.is_dir():
        return
    skip = pytest.mark.skip(reason=f"real datasets not found at {real}")
    for item in items:
        if "realdata" in item.keywords:
            item.add_marker(skip)


def _graphed_without_graphs(module, sample_args, allow_unused_input=False):
    """``torch.cuda.make_graphed_callables``'s autograd plumbing without the graphs (which need a
    GPU): the module runs inside one autograd Function over the user arguments and the module's
    parameters, its backward by ``autograd.grad`` over both. As a replayed graph does, every call
    writes its outputs and gradients into the same tensors and returns views of them, so that
    whoever keeps a step's output past the next step sees it overwritten."""
    params = tuple(p for p in module.parameters() if p.requires_grad)
    n_user, run = len(sample_args), module.forward
    module(*sample_args)  # the warm-up
    static: dict[str, list] = {}

    def into(name, tensors):
        """The tensors copied into this name's buffers (made at the first call), as views."""
        if name not in static:
            static[name] = [None if t is None else torch.empty_like(t) for t in tensors]
        return tuple(None if b is None else b.copy_(t).detach() for b, t in zip(static[name], tensors))

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            with torch.enable_grad():
                ctx.user = [u.detach().requires_grad_(u.requires_grad) for u in inputs[:n_user]]
                ctx.outs = run(*ctx.user)
            return into("outputs", [o.detach() for o in ctx.outs])

        @staticmethod
        def backward(ctx, *grads):
            pairs = [(o, g) for o, g in zip(ctx.outs, grads) if o.requires_grad]
            wrt = [u for u in ctx.user if u.requires_grad] + list(params)
            got = iter(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs],
                                           allow_unused=allow_unused_input))
            return into("grads", [next(got) if u.requires_grad else None for u in ctx.user] + list(got))

    module.forward = lambda *args: Graphed.apply(*args, *params)
    return module


@pytest.fixture
def stand_in_graphs(monkeypatch):
    """``_graphed_without_graphs`` stands in for ``torch.cuda.make_graphed_callables``, and
    ``train.cuda_graphs`` runs without a GPU. -> the modules captured so far."""
    captured = []

    def capture(module, sample_args, allow_unused_input=False):
        captured.append(module)
        return _graphed_without_graphs(module, sample_args, allow_unused_input)

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", capture)
    monkeypatch.setattr("hlgt.train.cuda_graphs.require_gpu", lambda device: None)
    return captured
