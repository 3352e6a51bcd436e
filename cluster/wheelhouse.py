"""Ray (and what it needs) for a machine without internet, in archives small enough to carry.

    python cluster/wheelhouse.py build --out wheelhouse --have numpy,pandas,pyarrow,torch
    python cluster/wheelhouse.py install wheelhouse/wheels.tar.xz.part00      # on the target

``build`` (on a machine that reaches a package index) downloads the wheels of Ray's training
extras and the project's other runtime needs for the target's Python and platform (``--python``,
``--platform``), leaves out the packages the target already has (``--have``), slims Ray's wheel
(its Java jar and the dashboard's source maps: a third of its size, unused by Python training;
the wheel's RECORD is rewritten to match), and packs the folder as ``wheels.tar.xz`` cut into
parts of at most ``--part-mib`` MiB (``.part00``, ``.part01``, ...), each small enough for one
transfer, with a ``requirements.txt`` naming what was asked for (Ray's extras and ``--also``).
``install`` joins the parts next to the one it is given, unpacks them and installs those
requirements with ``pip --no-index`` from the wheels alone. ``--dry-run`` prints what either would do.
``build`` writes only into a new or empty ``--out`` (or one it made before), ``install`` unpacks only
into a new or empty ``--into``: neither replaces nor deletes a file it did not make.
"""
from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import io
import shlex
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

# The extra `default`: the dashboard, which local Ray starts with (hlgt.ray_session.start_ray)
RAY = "ray[default,data,train,tune]==2.60.0"
# What training and sweeping import besides Ray and torch (W&B only when it logs: --also wandb).
# The annotators (jieba, TextBlob) are not needed where shards are carried in, and jieba has no wheel.
ALSO = "pyyaml,matplotlib"
# Files of Ray's wheel that Python training never reads: the Java worker's jar, source maps.
SLIM_GLOBS = ["ray/jars/*", "*.js.map"]
ARCHIVE = "wheels.tar.xz"
REQUIREMENTS = "requirements.txt"  # inside the archive: what install installs
MADE = ".wheelhouse"  # in a folder build made: only there does it delete and replace wheels and parts


def _names(csv: str) -> list[str]:
    return [n.strip() for n in csv.split(",") if n.strip()]


def download_command(out: Path, python: str, platform: str, also: str) -> list[str]:
    return [sys.executable, "-m", "pip", "download", RAY, *_names(also), "--only-binary=:all:", "--python-version",
            python, "--platform", platform, "-d", str(out)]


def normalised(name: str) -> str:
    """A distribution name as pip compares names."""
    return name.lower().replace("_", "-").replace(".", "-")


def drop_present(out: Path, have: list[str]) -> list[str]:
    """Remove the wheels of packages the target already has; returns their file names."""
    have_names = {normalised(h) for h in have}
    dropped = []
    for wheel in sorted(out.glob("*.whl")):
        if normalised(wheel.name.split("-")[0]) in have_names:
            wheel.unlink()
            dropped.append(wheel.name)
    return dropped


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def slim_wheel(wheel: Path, globs: list[str]) -> int:
    """Rewrite ``wheel`` without the files matching ``globs`` (and without their RECORD lines),
    its members stored uncompressed so that the archive's xz compresses their contents (xz gains
    little on deflated data); returns the number of files removed."""
    with zipfile.ZipFile(wheel) as src:
        keep = [i for i in src.infolist() if not any(fnmatch.fnmatch(i.filename, g) for g in globs)]
        removed = len(src.infolist()) - len(keep)
        record = next(i for i in keep if i.filename.endswith(".dist-info/RECORD"))
        tmp = wheel.with_suffix(".slim")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as dst:
            lines = []
            for info in keep:
                if info is record:
                    continue
                data = src.read(info)
                info.compress_type = zipfile.ZIP_STORED
                dst.writestr(info, data)
                lines.append(_record_line(info.filename, data))
            dst.writestr(record, "\n".join(lines + [f"{record.filename},,"]) + "\n")
    tmp.replace(wheel)
    return removed


def pack(folder: Path, part_mib: float) -> list[Path]:
    """``folder``'s wheels and requirements as ``folder/wheels.tar.xz`` cut into parts of at most
    ``part_mib`` MiB."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", preset=9) as tar:
        for item in [*sorted(folder.glob("*.whl")), folder / REQUIREMENTS]:
            tar.add(item, arcname=item.name)
    data, size = buffer.getvalue(), int(part_mib * 2**20)
    for old in folder.glob(ARCHIVE + ".part*"):
        old.unlink()
    parts = []
    for k, start in enumerate(range(0, len(data), size)):
        part = folder / f"{ARCHIVE}.part{k:02d}"
        part.write_bytes(data[start:start + size])
        parts.append(part)
    return parts


def requirements(also: str) -> str:
    """The archive's ``requirements.txt``: Ray with its extras and the ``--also`` packages."""
    return "\n".join([RAY, *_names(also)]) + "\n"


def install_command(wheels: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
            "-r", str(wheels / REQUIREMENTS)]


def build(args: argparse.Namespace) -> None:
    out = Path(args.out)
    command = download_command(out, args.python, args.platform, args.also)
    if args.dry_run:
        print(shlex.join(command))
        print(f"then: drop the wheels of {args.have or 'nothing'}; slim Ray's wheel ({', '.join(SLIM_GLOBS)}); "
              f"pack {out / ARCHIVE} in parts of {args.part_mib:g} MiB")
        return
    if out.is_dir() and any(out.iterdir()) and not (out / MADE).exists():
        raise SystemExit(f"wheelhouse: {out} holds files this script did not make: give a new or empty --out")
    out.mkdir(parents=True, exist_ok=True)
    (out / MADE).touch()
    subprocess.run(command, check=True)
    (out / REQUIREMENTS).write_text(requirements(args.also))
    dropped = drop_present(out, _names(args.have))
    print(f"[wheelhouse] left out (the target has them): {', '.join(dropped) or 'none'}")
    for wheel in out.glob("ray-*.whl"):
        print(f"[wheelhouse] {wheel.name}: {slim_wheel(wheel, SLIM_GLOBS)} unused files removed")
    parts = pack(out, args.part_mib)
    print(f"[wheelhouse] {len(parts)} part(s): "
          + ", ".join(f"{p.name} {p.stat().st_size / 2**20:.1f} MiB" for p in parts))


def install(args: argparse.Namespace) -> None:
    first = Path(args.archive)
    parts = sorted(first.parent.glob(first.name.rsplit(".part", 1)[0] + ".part*")) if ".part" in first.name else [first]
    if not parts:
        raise SystemExit(f"wheelhouse: no archive parts next to {first}")
    wheels = Path(args.into) if args.into else Path(tempfile.mkdtemp(prefix="wheelhouse-"))
    command = install_command(wheels)
    if args.dry_run:
        print(f"join {', '.join(p.name for p in parts)}; unpack into {wheels}")
        print(shlex.join(command))
        return
    if wheels.is_dir() and any(wheels.iterdir()):
        raise SystemExit(f"wheelhouse: --into {wheels} is not empty: give a new or empty folder")
    wheels.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts)), mode="r:xz") as tar:
        tar.extractall(wheels, filter="data")
    if not (wheels / REQUIREMENTS).is_file():
        raise SystemExit(f"wheelhouse: the archive holds no {REQUIREMENTS}: build it again with this script")
    subprocess.run(command, check=True)


def _positive_mib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects a number, got {text!r}")
    if not value * 2**20 >= 1:  # NaN too
        raise argparse.ArgumentTypeError(f"must be at least one byte (1/1048576 MiB), got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="cluster/wheelhouse.py", description=__doc__.split("\n\n")[0], allow_abbrev=False)
    sub = p.add_subparsers(dest="step", required=True)
    b = sub.add_parser("build", help="download, slim and pack the wheels (needs a package index)", allow_abbrev=False)
    b.add_argument("--out", default="wheelhouse")
    b.add_argument("--python", default="3.12", help="the target's Python version")
    b.add_argument("--platform", default="manylinux2014_x86_64", help="the target's wheel platform tag")
    b.add_argument("--also", default=ALSO, help="packages besides Ray, comma-separated (default %(default)s)")
    b.add_argument("--have", default="",
                   help="packages the target already has, comma-separated (their wheels are left out)")
    b.add_argument("--part-mib", type=_positive_mib, default=60.0, help="largest part, MiB")
    b.add_argument("--dry-run", action="store_true")
    i = sub.add_parser("install", help="join the parts, unpack and install (no index needed)", allow_abbrev=False)
    i.add_argument("archive", help="wheels.tar.xz, or its first part")
    i.add_argument("--into", default=None, help="where the wheels are unpacked (default: a new temporary folder)")
    i.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    build(args) if args.step == "build" else install(args)
    return 0


if __name__ == "__main__":
    # This script runs before anything is installed (hlgt's run_command may not import): a missing or
    # broken archive, a failed download or install ends with one line, as the project's commands do.
    try:
        sys.exit(main())
    except (OSError, tarfile.TarError, EOFError, subprocess.CalledProcessError) as error:
        sys.exit(f"cluster/wheelhouse.py: error: {error}")
