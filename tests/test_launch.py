"""Ray Train on a two-node ``ray.cluster_utils.Cluster`` on this machine: two data-parallel workers,
one per node; metrics reported, checkpoints written; a run killed after its first checkpoint
resumes when re-run with the same name and ends with the same number of epochs."""
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from hlgt import metrics as M
from hlgt.config import Config
from hlgt.train import checkpoint, launch

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TINY = {"data.dataset": "sample", "train.epochs": 3, "train.lr_step": 1, "train.batch_size": 16,
        "model.embedding_size": 8, "model.hidden_size": 16, "model.heads": 2, "model.layers": 1,
        "model.beam_size": 2, "model.max_output_len": 16, "train.wandb": False, "train.threads": 1}


@pytest.fixture(scope="module")
def cluster():
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray
    from ray.cluster_utils import Cluster

    # Two logical CPUs per node: one for the training worker, one for Ray Data's read tasks.
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    c.add_node(num_cpus=2)
    c.wait_for_nodes()
    ray.init(address=c.address)
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from hlgt.data.build import ensure_shards

    return ensure_shards(Config.from_flat({**TINY, "data.shards_dir": str(tmp_path_factory.mktemp("processed"))}))


def train_workers() -> list[dict]:
    """Ray Train's worker actors, alive or dead, from the GCS (the state API needs a dashboard)."""
    from ray._private import state

    return [a for a in state.actors().values() if a["ActorClassName"] == "RayTrainWorker"]


def fit(shards, storage, name, **kwargs):
    return launch.fit(Config.from_flat(TINY), shards, name=name, storage=str(storage), workers=2,
                      placement_strategy="STRICT_SPREAD", **kwargs)


def test_two_workers_on_two_nodes(cluster, shards, tmp_path):
    result = fit(shards, tmp_path, "two-nodes", max_failures=0)

    workers = train_workers()
    assert len(workers) == 2 and len({a["Address"]["NodeID"] for a in workers}) == 2, "each worker on its own node"
    assert result.metrics[M.EPOCH] == 3 and M.TEST_VALUE_ACC in result.metrics
    run = Path(result.run_dir)
    checkpoints = sorted(run.glob("checkpoint_*"))
    assert checkpoints and len(checkpoints) <= 3  # best 2 by val/value_acc + the latest
    state = checkpoint.read_checkpoint(result.checkpoint)
    assert state["finished"] and [m[M.EPOCH] for m in state["history"]] == [1, 2, 3]
    assert all(M.VAL_VALUE_ACC in m and M.TRAIN_LOSS in m for m in state["history"])
    # Published next to the checkpoints: the model folder, results, predictions.
    assert (run / "best" / "run_config.json").exists() and (run / "predictions_test.jsonl").exists()
    results = json.loads((run / "results.json").read_text())
    assert results[M.EPOCH] == 3
    # Validation during training is decoded by both ranks and gathered; the final one by rank 0
    # alone: the best epoch's two evaluations of the same weights agree.
    best = next(m for m in state["history"] if m[M.EPOCH] == state["best_epoch"])
    assert (results[M.VAL_VALUE_ACC], results[M.VAL_EQUATION_ACC]) == (best[M.VAL_VALUE_ACC], best[M.VAL_EQUATION_ACC])


def kill_a_worker_after_first_checkpoint(run_dir: Path, done: threading.Event, timeout: float = 240):
    snapshot = run_dir / "checkpoint_manager_snapshot.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done.is_set():
        if snapshot.exists():
            try:
                latest = json.loads(snapshot.read_text()).get("latest_checkpoint_result")
            except json.JSONDecodeError:
                latest = None
            if latest and latest["metrics"].get(M.EPOCH, 0) >= 1:
                alive = [a for a in train_workers() if a["State"] == "ALIVE"]
                if alive:
                    os.kill(alive[-1]["Pid"], signal.SIGKILL)
                    return
        time.sleep(0.05)


def test_killed_run_resumes_with_the_same_name(cluster, shards, tmp_path):
    name = "killed"
    done = threading.Event()
    killer = threading.Thread(target=kill_a_worker_after_first_checkpoint, args=(tmp_path / name, done))
    killer.start()
    try:
        first = fit(shards, tmp_path, name, max_failures=0, raise_on_error=False)
    finally:
        done.set()
        killer.join()
    assert first.error is not None, "the run should have died with its worker"

    second = fit(shards, tmp_path, name, max_failures=0)
    state = checkpoint.read_checkpoint(second.checkpoint)
    assert state["starts"][0] == 0 and state["starts"][-1] >= 1, "the re-run continued from a checkpoint"
    assert [m[M.EPOCH] for m in state["history"]] == [1, 2, 3]  # as many epochs as an uninterrupted run
    assert second.metrics[M.EPOCH] == 3
