"""Submit an HLGT command to a Ray cluster through the Ray Jobs API, and follow it to the end.

    python cluster/submit.py -- python tune/sweep.py --ablation all --dataset mawps
    python cluster/submit.py --address http://127.0.0.1:8265 --no-wait -- python -m hlgt.train --dataset math23k

The address defaults to $RAY_ADDRESS, else the dashboard that `ray dashboard ray_cluster.yaml`
forwards to this machine. The working tree is uploaded as the job's working directory, so the job
runs the code you have here; the variables the project reads (W&B's mode, project and entity,
HLGT_STORAGE, HLGT_DATA_DIR) travel with the job when they are set in your shell. Secrets never do:
`ray job list` prints a job's environment in plain text. The W&B API key reaches the nodes as a
file readable by you only (`python cluster/put_wandb_key.py`, then ray_cluster.yaml syncs it to every
worker); `hlgt.train.tracking` reads it there.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from ray.job_submission import JobStatus, JobSubmissionClient

ROOT = Path(__file__).resolve().parents[1]
PASSED_VARIABLES = (
    "WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_BASE_URL",
    "HLGT_STORAGE", "HLGT_DATA_DIR", "RAY_AUTH_MODE",
)  # no secrets: `ray job list` prints a job's environment

UPLOAD_EXCLUDES = [".git", ".venv", "**/__pycache__", "datasets/processed", "runs", "wandb", "*.egg-info"]
DEFAULT_ADDRESS = "http://127.0.0.1:8265"


def runtime_env(upload: bool) -> dict:
    env = {"env_vars": {name: os.environ[name] for name in PASSED_VARIABLES if os.environ.get(name)}}
    if upload:
        env["working_dir"] = str(ROOT)
        env["excludes"] = UPLOAD_EXCLUDES
    return env


def submit(address: str, command: list[str], upload: bool = True,
           job_id: str | None = None) -> tuple[JobSubmissionClient, str]:
    client = JobSubmissionClient(address)
    env = runtime_env(upload)
    job_id = client.submit_job(entrypoint=shlex.join(command), runtime_env=env, submission_id=job_id)
    passed = ", ".join(sorted(env["env_vars"])) or "none"
    print(f"submitted {job_id} to {address}: {shlex.join(command)} (variables passed: {passed})", flush=True)
    if os.environ.get("WANDB_API_KEY"):
        print("WANDB_API_KEY is not sent with the job (`ray job list` would show it): the nodes read "
              "~/.hlgt/wandb_api_key, which `python cluster/put_wandb_key.py` puts on the cluster", flush=True)
    return client, job_id


def follow(client: JobSubmissionClient, job_id: str, poll_s: float = 2.0, timeout_s: float | None = None) -> JobStatus:
    """Print the job's log as it grows; return its final status."""
    printed, start = 0, time.monotonic()
    terminal = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
    while True:
        status = client.get_job_status(job_id)
        logs = client.get_job_logs(job_id)
        sys.stdout.write(logs[printed:])
        sys.stdout.flush()
        printed = len(logs)
        if status in terminal:
            return status
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            client.stop_job(job_id)
            raise TimeoutError(f"job {job_id} still {status} after {timeout_s:.0f} s; stopped it")
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS", DEFAULT_ADDRESS),
                        help="Ray dashboard address (default $RAY_ADDRESS or %(default)s)")
    parser.add_argument("--no-upload", action="store_true",
                        help="run the project as installed on the cluster instead of uploading this tree")
    parser.add_argument("--no-wait", action="store_true", help="submit and return; follow with `ray job logs -f`")
    parser.add_argument("--job-id", default=None, help="submission id (default: Ray picks one)")
    parser.add_argument("--timeout", type=float, default=None, help="stop the job after this many seconds")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --, e.g. -- python tune/sweep.py --smoke-test")
    client, job_id = submit(args.address, command, upload=not args.no_upload, job_id=args.job_id)
    if args.no_wait:
        print(f"follow it with: ray job logs --address {args.address} -f {job_id}")
        return 0
    status = follow(client, job_id, timeout_s=args.timeout)
    print(f"\njob {job_id}: {status}")
    return 0 if status == JobStatus.SUCCEEDED else 1


if __name__ == "__main__":
    from hlgt.commands.cli import run_command

    sys.exit(run_command(main, "cluster/submit.py"))
