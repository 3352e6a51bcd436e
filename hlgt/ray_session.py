"""Starting Ray or joining a cluster: the one place a command connects to Ray.

Which Ray: ``--address`` when given (``auto``, ``ray://...``, host:port), else the cluster of the
Ray job the command runs in (Ray sets ``RAY_ADDRESS`` for a job's command), else a Ray of its own
(``"local"``): left to itself, ``ray.init()`` would join whatever Ray a ``ray start`` last left on
this machine.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def ray_address(explicit: str | None) -> str:
    """The Ray a command runs on: ``explicit``, else ``$RAY_ADDRESS``, else ``"local"``."""
    return explicit or os.environ.get("RAY_ADDRESS") or "local"


def start_ray(address: str | None = None, *, console: bool = True, dashboard: bool = True, cpus: int | None = None,
              ship_package: bool = False) -> bool:
    """Connect to ``ray_address(address)`` unless Ray is up in this process already. -> whether
    this call connected (the caller then shuts Ray down when it is done with it).

    ``console=False`` keeps the workers' output (and Ray's own INFO lines) off this console: it
    stays in Ray's session logs, and the caller prints what matters. A local Ray starts with its
    dashboard unless ``dashboard=False``: Ray Train's PlacementGroupCleaner asks the state API
    (served by the dashboard) whether a run's controller is alive, and without it the placement
    group of a run that Tune stopped early is never removed, starving every later trial. ``cpus``:
    the CPUs a local Ray offers. ``ship_package``: a cluster named by ``address`` gets this package
    for its workers, so that they import the same code (a Ray job's runtime environment ships its
    working tree already).
    """
    import ray  # seconds to import: only the commands that run on Ray pay for it

    if ray.is_initialized():
        return False
    target = ray_address(address)
    options = {"log_to_driver": console, "logging_level": logging.INFO if console else logging.WARNING}
    if target == "local":
        ray.init(address=target, include_dashboard=dashboard, num_cpus=cpus, **options)
    elif address and ship_package:
        ray.init(address=target, runtime_env={"py_modules": [str(PACKAGE_DIR)]}, **options)
    else:
        ray.init(address=target, **options)
    return True
