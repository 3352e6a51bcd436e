"""The cluster files pass Ray's own launcher validation; the job helper runs jobs on a local Ray."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_FILES = [ROOT / "ray_cluster.yaml", ROOT / "cluster" / "local_cluster.yaml"]


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.name)
def test_cluster_yaml_passes_ray_validation(path):
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load(path.read_text())
    validate_config(prepare_config(config))  # the launcher's schema, no cloud credentials needed


def test_cluster_yaml_opens_nothing_to_the_world():
    config = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())
    head = " ".join(config["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head
    assert "0.0.0.0" not in yaml.safe_dump(config)
    # Secrets never live in the cluster file: they travel with each job.
    assert "WANDB_API_KEY" not in (ROOT / "ray_cluster.yaml").read_text().split("# Secrets")[0]


def test_cluster_yaml_rejects_unknown_keys():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())
    config["not_a_ray_key"] = 1
    with pytest.raises(Exception):
        validate_config(prepare_config(config))


def test_runtime_env_passes_variables_without_printing_them(monkeypatch, capsys):
    sys.path.insert(0, str(ROOT / "cluster"))
    try:
        import submit
    finally:
        sys.path.pop(0)
    monkeypatch.setenv("WANDB_API_KEY", "secret-key-value")
    monkeypatch.setenv("HLGT_STORAGE", "s3://bucket/hlgt")
    env = submit.runtime_env(upload=True)
    assert env["env_vars"]["WANDB_API_KEY"] == "secret-key-value"
    assert env["env_vars"]["HLGT_STORAGE"] == "s3://bucket/hlgt"
    assert env["working_dir"] == str(ROOT)


@pytest.fixture(scope="module")
def local_ray_with_jobs(tmp_path_factory):
    """A local Ray head with the dashboard (the Jobs API lives there), stopped afterwards."""
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    port = "8275"
    temp = tmp_path_factory.mktemp("ray")
    start = subprocess.run(
        ["ray", "start", "--head", "--num-cpus=2", "--include-dashboard=true", f"--dashboard-port={port}",
         "--port=6390", "--disable-usage-stats", f"--temp-dir={temp}"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    if start.returncode != 0:
        pytest.fail(f"ray start failed:\n{start.stdout}\n{start.stderr}")
    yield f"http://127.0.0.1:{port}", env
    subprocess.run(["ray", "stop", "--force"], env=env, capture_output=True, timeout=120)


def _submit(address, env, *command, timeout=60):
    return subprocess.run(
        [sys.executable, str(ROOT / "cluster" / "submit.py"), "--address", address, "--timeout", str(timeout),
         "--", *command],
        env=dict(env, WANDB_API_KEY="secret-key-value"), capture_output=True, text=True, timeout=timeout + 120,
    )


@pytest.mark.ray
def test_submit_runs_a_job_and_reports_its_failure(local_ray_with_jobs):
    address, env = local_ray_with_jobs
    ok = _submit(address, env, "python", "-c", "import os, hlgt.config; print('key set:', bool(os.environ['WANDB_API_KEY']))")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "key set: True" in ok.stdout and "SUCCEEDED" in ok.stdout
    assert "secret-key-value" not in ok.stdout + ok.stderr
    bad = _submit(address, env, "python", "-c", "raise SystemExit(3)")
    assert bad.returncode == 1 and "FAILED" in bad.stdout


@pytest.mark.ray
@pytest.mark.slow
def test_submit_runs_the_smoke_sweep(local_ray_with_jobs, tmp_path):
    address, env = local_ray_with_jobs
    done = _submit(address, env, "python", "tune/sweep.py", "--ablation", "full", "--smoke-test", "--no-wandb",
                   "--storage", str(tmp_path), "--name", "job-smoke", timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "SUCCEEDED" in done.stdout
    out = tmp_path / "job-smoke"
    assert (out / "results.md").exists() and (out / "results.csv").exists()
