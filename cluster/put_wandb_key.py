"""Put your W&B API key on a Ray cluster as a file only you can read, never in a job's environment.

    python cluster/put_wandb_key.py                                   # the cluster of ray_cluster.yaml
    python cluster/put_wandb_key.py --cluster cluster/local_cluster.yaml

The key comes from WANDB_API_KEY in your shell, else you are asked for it (not echoed). It is
written to a temporary folder readable by you only and copied with `ray rsync-up` to the head
node's ~/.hlgt/wandb_api_key (rsync keeps the file's mode, 600); the cluster file's
`cluster_synced_files` then copies it from the head to every worker the autoscaler starts. Jobs
find it there (hlgt.train.tracking), so `cluster/submit.py` never sends the key with a job, where
`ray job list` would print it. Run it once after `ray up`, and again after changing the key.
"""
from __future__ import annotations

import argparse
import getpass
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REMOTE_DIR = "~/.hlgt/"  # ~/.hlgt/wandb_api_key on every node (hlgt.train.tracking.KEY_FILE)
KEY_NAME = "wandb_api_key"


def write_key_folder(key: str, parent: Path) -> Path:
    """``parent/.hlgt/wandb_api_key``, the folder 700 and the file 600, created with those modes
    (never readable by others, not even for a moment)."""
    folder = parent / ".hlgt"
    folder.mkdir(mode=0o700)
    fd = os.open(folder / KEY_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(key.strip() + "\n")
    return folder


def upload_command(cluster: Path, folder: Path) -> list[str]:
    """`ray rsync-up` of the folder's contents to the head's ~/.hlgt/ (the key never appears in it)."""
    return ["ray", "rsync-up", str(cluster), f"{folder}/", REMOTE_DIR]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--cluster", default=str(ROOT / "ray_cluster.yaml"), help="the cluster file (default %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="print the upload command, upload nothing")
    args = p.parse_args(argv)
    cluster = Path(args.cluster)
    if not cluster.is_file():
        raise FileNotFoundError(f"cluster file {cluster} not found")
    key = os.environ.get("WANDB_API_KEY") or ("" if args.dry_run else getpass.getpass("W&B API key: "))
    if not key.strip() and not args.dry_run:
        raise ValueError("no W&B API key given (set WANDB_API_KEY or type it when asked)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_key_folder(key or "dry-run", Path(tmp))
        command = upload_command(cluster, folder)
        print(shlex.join(command), flush=True)
        if args.dry_run:
            return 0
        done = subprocess.run(command)
    if done.returncode != 0:
        print(f"ray rsync-up failed (status {done.returncode}): is the cluster up (`ray up {cluster}`)?",
              file=sys.stderr)
        return 1
    print(f"the key is on the head node as {REMOTE_DIR}{KEY_NAME}; workers get it when they start")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from hlgt.commands.cli import run_command

    sys.exit(run_command(main, "cluster/put_wandb_key.py"))
