"""The cluster files pass Ray's own launcher validation; the job helper runs jobs on a local Ray."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
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
    # Ray's launcher opens SSH to the world; the first head setup command closes it again.
    assert any("cluster/restrict_ssh.py" in c for c in config["head_setup_commands"])
    for path in CLUSTER_FILES:
        text = yaml.safe_load(path.read_text())
        assert "WANDB_API_KEY" not in yaml.safe_dump(text)  # no secret, nor a slot for one
        assert text["cluster_synced_files"] == ["~/.hlgt/wandb_api_key"]


def test_cluster_yaml_rejects_unknown_keys():
    import jsonschema
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())
    config["not_a_ray_key"] = 1
    with pytest.raises(jsonschema.ValidationError, match="not_a_ray_key"):
        validate_config(prepare_config(config))


def _cluster_module(name):
    sys.path.insert(0, str(ROOT / "cluster"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


def test_runtime_env_never_carries_the_api_key(monkeypatch):
    submit = _cluster_module("submit")
    for name in submit.PASSED_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "secret-key-value")
    monkeypatch.setenv("WANDB_PROJECT", "hlgt-test")
    monkeypatch.setenv("HLGT_STORAGE", "s3://bucket/hlgt")
    env = submit.runtime_env(upload=True)
    assert "secret-key-value" not in repr(env)
    assert env["env_vars"] == {"WANDB_PROJECT": "hlgt-test", "HLGT_STORAGE": "s3://bucket/hlgt"}
    assert env["working_dir"] == str(ROOT)


def test_the_key_folder_is_private_from_its_first_byte(tmp_path, monkeypatch, capsys):
    put = _cluster_module("put_wandb_key")
    folder = put.write_key_folder(" secret-key-value\n", tmp_path)
    assert folder.stat().st_mode & 0o777 == 0o700
    assert (folder / "wandb_api_key").stat().st_mode & 0o777 == 0o600
    assert (folder / "wandb_api_key").read_text() == "secret-key-value\n"
    command = put.upload_command(ROOT / "ray_cluster.yaml", folder)
    assert command[:3] == ["ray", "rsync-up", str(ROOT / "ray_cluster.yaml")] and command[-1] == "~/.hlgt/"
    monkeypatch.setenv("WANDB_API_KEY", "secret-key-value")
    assert put.main(["--dry-run"]) == 0
    assert "secret-key-value" not in capsys.readouterr().out


def test_tracking_reads_the_key_file_only_when_private(tmp_path, monkeypatch):
    from hlgt.train import tracking

    key = tmp_path / "wandb_api_key"
    key.write_text("secret-key-value\n")
    monkeypatch.setenv("WANDB_API_KEY", "")  # unset for the test, restored (or removed) afterwards
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HLGT_WANDB_KEY_FILE", str(key))
    key.chmod(0o644)
    with pytest.raises(PermissionError, match="readable by others: chmod 600"):
        tracking.resolve_mode(True)
    key.chmod(0o600)
    assert tracking.resolve_mode(True) == "online" and os.environ["WANDB_API_KEY"] == "secret-key-value"
    os.environ["WANDB_API_KEY"] = ""
    monkeypatch.setenv("HLGT_WANDB_KEY_FILE", str(tmp_path / "none"))
    assert tracking.resolve_mode(True) == "offline"


def test_ssh_is_closed_to_the_world_and_opened_to_one_range():
    ssh = _cluster_module("restrict_ssh")
    assert ssh.default_cidr({"SSH_CLIENT": "198.51.100.7 52311 22"}) == "198.51.100.7/32"
    assert ssh.default_cidr({"HLGT_SSH_CIDR": "203.0.113.9/24", "SSH_CLIENT": "198.51.100.7 1 22"}) == "203.0.113.0/24"
    for bad, message in (("0.0.0.0/0", "whole internet"), ("nope", "not an address range")):
        with pytest.raises(ValueError, match=message):
            ssh.default_cidr({"HLGT_SSH_CIDR": bad})
    with pytest.raises(ValueError, match="set HLGT_SSH_CIDR"):
        ssh.default_cidr({})
    # What Ray's launcher writes: all traffic within the group, SSH from anywhere.
    ray_rules = [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "sg-1"}], "IpRanges": [], "Ipv6Ranges": []},
                 {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}],
                  "Ipv6Ranges": [{"CidrIpv6": "::/0"}]},
                 {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]
    revoke, authorize = ssh.changes(ray_rules, "198.51.100.7/32")
    assert revoke == [{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}],
                       "Ipv6Ranges": [{"CidrIpv6": "::/0"}]}]
    assert authorize[0]["IpRanges"][0]["CidrIp"] == "198.51.100.7/32" and authorize[0]["FromPort"] == 22
    done = [ray_rules[0],
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "198.51.100.7/32"}]}]
    assert ssh.changes(done, "198.51.100.7/32") == ([], [])  # a second `ray up` changes nothing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_head(temp: Path) -> None:
    """Stop the processes of the Ray head started with ``--temp-dir=temp``, not every Ray on the
    machine as ``ray stop`` would: a user's own Ray work beside the tests goes on. Each inherited
    ``HLGT_TEST_RAY_HEAD=temp`` from ``ray start`` (found in its environment: Ray's agents rename
    themselves, so their command lines need not name the folder)."""
    marker = f"HLGT_TEST_RAY_HEAD={temp}".encode()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and marker in (proc / "environ").read_bytes().split(b"\0"):
                    os.kill(int(proc.name), sig)
            except (OSError, ValueError):  # gone meanwhile, or another user's
                pass
        time.sleep(2)


@pytest.fixture(scope="module")
def local_ray_with_jobs(tmp_path_factory):
    """A local Ray head with the dashboard (the Jobs API lives there and needs its agent) on free
    ports, so that another Ray on the machine is neither joined nor in the way; stopped afterwards."""
    # Without the shell's W&B key: the submit test checks that none reaches the job.
    temp = tmp_path_factory.mktemp("ray")
    env = {**{k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}, "RAY_AUTH_MODE": "disabled",
           "HLGT_TEST_RAY_HEAD": str(temp)}
    port = str(_free_port())
    start = subprocess.run(
        ["ray", "start", "--head", "--num-cpus=2", "--include-dashboard=true", f"--dashboard-port={port}",
         f"--port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}", "--disable-usage-stats",
         f"--temp-dir={temp}"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    if start.returncode != 0:
        _stop_head(temp)
        pytest.fail(f"ray start failed:\n{start.stdout}\n{start.stderr}")
    yield f"http://127.0.0.1:{port}", env
    _stop_head(temp)


def _submit(address, env, *command, timeout=60):
    return subprocess.run(
        [sys.executable, str(ROOT / "cluster" / "submit.py"), "--address", address, "--timeout", str(timeout),
         "--", *command],
        env=dict(env, WANDB_API_KEY="secret-key-value"), capture_output=True, text=True, timeout=timeout + 120,
    )


@pytest.mark.ray
def test_submit_runs_a_job_and_reports_its_failure(local_ray_with_jobs):
    address, env = local_ray_with_jobs
    ok = _submit(address, env, "python", "-c",
                 "import os, hlgt.config; print('key sent:', 'WANDB_API_KEY' in os.environ)")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "key sent: False" in ok.stdout and "SUCCEEDED" in ok.stdout
    assert "secret-key-value" not in ok.stdout + ok.stderr
    # No listing shows it: `ray job list` and the job's details.
    listing = subprocess.run(["ray", "job", "list", "--address", address], env=env, capture_output=True,
                             text=True, timeout=120)
    assert listing.returncode == 0 and "secret-key-value" not in listing.stdout + listing.stderr
    bad = _submit(address, env, "python", "-c", "raise SystemExit(3)")
    assert bad.returncode == 1 and "FAILED" in bad.stdout


@pytest.mark.ray
def test_submit_builds_shards_on_the_jobs_cluster(local_ray_with_jobs, tmp_path):
    # The job's command joins the job's cluster (RAY_ADDRESS), asking it for no CPUs of its own.
    address, env = local_ray_with_jobs
    done = _submit(address, env, "python", "-m", "hlgt.data.build", "--dataset", "sample", "--actors", "1",
                   "--out", str(tmp_path / "sample"), timeout=300)
    assert done.returncode == 0 and "SUCCEEDED" in done.stdout, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Traceback" not in done.stdout  # Ray Data's iterator ends before Ray shuts down
    assert json.loads((tmp_path / "sample" / "manifest.json").read_text())["build"]["actors"] == 1


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


@pytest.mark.slow
def test_the_gpu_check_script_runs_its_steps_on_the_cpu(tmp_path):
    # The prepared device script, on the sample data and the CPU: every step runs and logs.
    # BEFORE: an older commit's package, timed first (here this one, copied).
    shutil.copytree(ROOT / "hlgt", tmp_path / "before" / "hlgt")
    # STEPS leaves out compiled: compiling takes minutes on a CPU; tests/test_solver.py compiles
    env = dict(os.environ, OUT=str(tmp_path / "out"), DEVICE="cpu", DATASET="sample", MINUTES="0.2", LIMIT="64",
               BATCH="16", SHARDS=str(tmp_path / "shards" / "sample-offline"), BEFORE=str(tmp_path / "before"),
               PROFILE_STEPS="2", SCHEDULE_MINUTES="0.05", RUNS=str(tmp_path / "runs"),
               STEPS="probe curves speed profile replay recurrence bigrus graphs schedule")
    subprocess.run([sys.executable, "-m", "hlgt.data.build", "--dataset", "sample", "--no-ray", "--shards-dir",
                    str(tmp_path / "shards")], cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    # the limit catches a hung step: the steps took 5-9 minutes on two cores shared with a training run
    done = subprocess.run(["bash", str(ROOT / "cluster" / "gpu_check.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| full |" in (tmp_path / "out" / "bench.txt").read_text()
    assert "| full |" in (tmp_path / "out" / "bench_before.txt").read_text()
    assert (tmp_path / "out" / "curve" / "curve.json").is_file()
    assert "[bench] gts: " in (tmp_path / "out" / "time_steps.txt").read_text()
    assert "replay skipped" in (tmp_path / "out" / "replay.txt").read_text()  # a CUDA graph needs a GPU
    assert "recurrence skipped" in (tmp_path / "out" / "recurrence.txt").read_text()
    assert "bigrus skipped" in (tmp_path / "out" / "bench_bigrus.txt").read_text()
    assert "graphs skipped" in (tmp_path / "out" / "bench_graphs.txt").read_text()
    assert not (tmp_path / "out" / "bench_compiled.txt").exists()  # a step not asked for does not run
    stopped = {}
    for arm in ("full", "gts"):  # stopped by its time budget before epoch 30, its best model tested
        results = json.loads((tmp_path / "out" / f"schedule_{arm}.json").read_text())
        assert "test/value_acc" in results
        lines = (tmp_path / "out" / f"schedule_{arm}_metrics.jsonl").read_text().splitlines()
        epochs = [json.loads(line)["epoch"] for line in lines]  # each epoch's record, then the final one
        stopped[arm] = results["epoch"]
        assert epochs == [*range(1, stopped[arm] + 1), stopped[arm]] and stopped[arm] < 30
    # the two arms' test predictions pair up in hlgt.train.compare
    done = subprocess.run([sys.executable, "-m", "hlgt.train.compare",
                           "--a", str(tmp_path / "out" / "schedule_full_predictions_test.jsonl"),
                           "--b", str(tmp_path / "out" / "schedule_gts_predictions_test.jsonl")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "| schedule_full_predictions_test.jsonl / schedule_gts" in done.stdout, done.stderr
    # The next call on the same machine goes on with the schedule where the first one stopped.
    env.update(STEPS="schedule", SCHEDULE_ARMS="gts", RESUME="true")
    done = subprocess.run(["bash", str(ROOT / "cluster" / "gpu_check.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    log = (tmp_path / "out" / "schedule_gts.log").read_text()
    assert f"after epoch {stopped['gts']}" in log and f"epoch {stopped['gts'] + 1}/30" in log
    assert json.loads((tmp_path / "out" / "schedule_gts.json").read_text())["epoch"] > stopped["gts"]


def test_the_gpu_check_script_runs_the_steps_in_the_order_given_and_names_an_unknown_one(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path / "out"), DEVICE="cpu", DATASET="sample", STEPS="replay nope graphs")
    done = subprocess.run(["bash", str(ROOT / "cluster" / "gpu_check.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert ("[gpu_check] no step named nope; the steps: bigrus compiled curves graphs probe profile recurrence replay "
            "schedule speed" in lines)
    order = [i for i, line in enumerate(lines) if "one batch's step eager" in line or "no step named" in line
             or "speed with train.cuda_graphs" in line]
    assert len(order) == 3 and order == sorted(order)
    assert "one batch's step eager" in lines[order[0]] and "speed with train.cuda_graphs" in lines[order[2]]


def _fake_wheel(folder: Path, name: str, files: dict[str, bytes]) -> Path:
    """A minimal pure-Python wheel holding ``files`` (paths inside the wheel -> contents)."""
    import zipfile

    dist, version = name, "1.0"
    info = f"{dist}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    wheelhouse = _cluster_module("wheelhouse")
    record = [wheelhouse._record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def test_the_wheelhouse_slims_packs_in_parts_and_installs_from_them(tmp_path, monkeypatch, capsys):
    import zipfile

    wheelhouse = _cluster_module("wheelhouse")
    house = tmp_path / "house"
    house.mkdir()
    wheel = _fake_wheel(house, "raylike", {"raylike/__init__.py": b"VALUE = 7\n",
                                           "raylike/jars/dist.jar": os.urandom(4096),
                                           "raylike/static/main.js.map": b"{}", "raylike/static/main.js": b"x"})
    _fake_wheel(house, "numpy", {"numpy/__init__.py": b""})
    assert wheelhouse.drop_present(house, ["NumPy", "torch"]) == ["numpy-1.0-py3-none-any.whl"]
    assert wheelhouse.slim_wheel(wheel, wheelhouse.SLIM_GLOBS + ["raylike/jars/*"]) == 2
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        record = z.read("raylike-1.0.dist-info/RECORD").decode().splitlines()
        assert "raylike/jars/dist.jar" not in names and "raylike/static/main.js.map" not in names
        assert {line.split(",")[0] for line in record} == names  # RECORD lists exactly what the wheel holds
        for line in record[:-1]:
            name = line.split(",")[0]
            assert line == wheelhouse._record_line(name, z.read(name))
    # pip installs the rewritten wheel.
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target",
                           str(tmp_path / "site"), str(wheel)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "raylike" / "__init__.py").read_text() == "VALUE = 7\n"

    (house / wheelhouse.REQUIREMENTS).write_text(wheelhouse.requirements("pyyaml"))
    parts = wheelhouse.pack(house, part_mib=256 / 2**20)  # 256-byte parts: several
    assert len(parts) > 1 and all(p.stat().st_size <= 256 for p in parts)
    ran = []
    monkeypatch.setattr(wheelhouse.subprocess, "run", lambda command, check: ran.append(command))
    wheelhouse.main(["install", str(parts[0]), "--into", str(tmp_path / "unpacked")])
    assert (tmp_path / "unpacked" / wheel.name).read_bytes() == wheel.read_bytes()
    assert ran == [wheelhouse.install_command(tmp_path / "unpacked")]
    assert ran[0][4:] == ["--no-index", "--find-links", str(tmp_path / "unpacked"),
                          "-r", str(tmp_path / "unpacked" / "requirements.txt")]
    # It installs what build was asked for, not this script's default list.
    assert (tmp_path / "unpacked" / "requirements.txt").read_text().split() == [wheelhouse.RAY, "pyyaml"]

    wheelhouse.main(["build", "--out", str(tmp_path / "w"), "--have", "numpy", "--dry-run"])
    wheelhouse.main(["install", str(parts[0]), "--dry-run", "--into", str(tmp_path / "u2")])
    out = capsys.readouterr().out
    assert ("pip download 'ray[default,data,train,tune]==2.60.0' pyyaml matplotlib --only-binary=:all: "
            "--python-version 3.12") in out
    assert f"join {', '.join(p.name for p in parts)}" in out and not (tmp_path / "u2").exists() and len(ran) == 1
    # Neither deletes nor replaces files it did not make.
    with pytest.raises(SystemExit, match=f"{house} holds files this script did not make"):
        wheelhouse.main(["build", "--out", str(house), "--have", "numpy"])
    with pytest.raises(SystemExit, match=f"--into {tmp_path / 'unpacked'} is not empty"):
        wheelhouse.main(["install", str(parts[0]), "--into", str(tmp_path / "unpacked")])
    assert len(ran) == 1 and (house / wheel.name).exists()


def test_the_wheelhouse_ends_a_mistake_with_one_line(tmp_path):
    # A part size that would cut no part (0) or delete the parts and write none (< 0) is refused
    # before anything downloads; a missing or broken archive ends without a traceback.
    script = str(ROOT / "cluster" / "wheelhouse.py")
    for size in ("0", "-1", "nan"):
        done = subprocess.run([sys.executable, script, "build", "--part-mib", size, "--dry-run"], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2 and "argument --part-mib: must be at least one byte" in done.stderr
    (tmp_path / "broken.tar.xz").write_bytes(b"not xz")
    for archive, message in ((tmp_path / "missing.tar.xz", "No such file or directory"),
                             (tmp_path / "broken.tar.xz", "not an lzma file")):
        done = subprocess.run([sys.executable, script, "install", str(archive), "--into", str(tmp_path / "into")],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and done.stderr.startswith("cluster/wheelhouse.py: error: ")
        assert message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.ray
@pytest.mark.slow
def test_the_gpu_ray_check_script_runs_its_steps_on_the_cpu(tmp_path):
    # The prepared Ray-on-GPU device script, on the sample data and CPUs (Ray is installed here, so
    # no wheelhouse), its Ray Train step: the killed run resumes, the summary says so. (Its sweeps
    # run the sweep command, tested in test_sweep.py; here they would add four Ray starts.)
    shards = tmp_path / "shards"
    subprocess.run([sys.executable, "-m", "hlgt.data.build", "--dataset", "sample", "--no-ray", "--shards-dir",
                    str(shards)], cwd=ROOT, check=True, capture_output=True, timeout=300)
    tiny = ("model.embedding_size=8 model.hidden_size=16 model.heads=2 model.layers=1 model.beam_size=2 "
            "model.max_output_len=16 train.batch_size=16 train.threads=1")
    env = dict(os.environ, OUT=str(tmp_path / "out"), SHARDS=str(shards / "sample-offline"), DATASET="sample", GPU="0",
               EPOCHS="4", STEPS="train", RUNS=str(tmp_path / "runs"), SET=tiny)
    done = subprocess.run(["bash", str(ROOT / "cluster" / "gpu_ray_check.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert done.returncode == 0, summary + done.stderr[-3000:]
    assert "killed after its first checkpoint" in summary
    assert "resumed run: starts after epochs [0, " in summary and "epochs [1, 2, 3, 4], finished True" in summary
