"""The search space: which values of which config keys a sweep tries, and their short names.

A dimension is a list of values or ``{uniform: [lo, hi]}`` / ``{loguniform: [lo, hi]}``. The first
configuration is the centre (the base config, i.e. the paper's settings, where the space holds
them); the others are random draws, or the whole product with ``grid``.
"""
from __future__ import annotations

import itertools
import math
import random
from typing import Any

from hlgt.config import Config

# Heads, layers and β_com, centred on the paper's 4 / 2 / 0.1; the learning rate and hidden size
# are searched only when asked for.
DEFAULT_SPACE: dict[str, list] = {"model.heads": [2, 4, 8], "model.layers": [1, 2, 3],
                                  "model.beta_com": [0.05, 0.1, 0.2]}
SHORT = {"model.heads": "heads", "model.layers": "layers", "model.beta_com": "beta_com", "train.lr": "lr",
         "model.hidden_size": "hidden", "model.embedding_size": "embedding", "model.dropout": "dropout"}


def parse_values(text: str) -> list:
    """``"2,4,8"`` → ``[2, 4, 8]`` (ints, floats, booleans or strings)."""
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        for cast in (int, float):
            try:
                out.append(cast(item))
                break
            except ValueError:
                continue
        else:
            out.append({"true": True, "false": False}.get(item.lower(), item))
    return out


def _is_number(value: Any) -> bool:
    """A bound of a continuous dimension: a number, or text of one (YAML reads ``1e-4`` as text)."""
    try:
        return not isinstance(value, bool) and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _check_dimension(key: str, dim: Any) -> None:
    if key not in Config().to_flat():
        raise ValueError(f"search space key {key!r} is not a config key")
    if isinstance(dim, list):
        if not dim:
            raise ValueError(f"search space {key!r} has no values")
        if not all(isinstance(v, (str, int, float)) for v in dim):
            raise ValueError(f"search space {key!r} values must be numbers, strings or booleans, got {dim!r}")
    elif not (isinstance(dim, dict) and len(dim) == 1 and next(iter(dim)) in ("uniform", "loguniform")
              and isinstance(bounds := next(iter(dim.values())), list) and len(bounds) == 2
              and all(_is_number(b) for b in bounds)):
        raise ValueError(f"search space {key!r} must be a list of values or {{uniform|loguniform: [lo, hi]}}, "
                         f"got {dim!r}")
    elif "loguniform" in dim and min(float(b) for b in dim["loguniform"]) <= 0:
        raise ValueError(f"search space {key!r}: loguniform bounds must be > 0 (it draws their logarithm), "
                         f"got {dim['loguniform']!r}")


def check_space(space: dict[str, Any]) -> dict[str, Any]:
    """``space`` when every dimension is a config key with a list of values or a continuous
    range, else ``ValueError`` naming the key."""
    for key, dim in space.items():
        _check_dimension(key, dim)
    return space


def space_size(space: dict[str, Any]) -> float:
    """How many configurations the space holds (its grid's size, computed, not enumerated);
    ``math.inf`` with a continuous dimension."""
    if not all(isinstance(d, list) for d in space.values()):
        return math.inf
    return math.prod(len(d) for d in space.values())


def _draw(dim: Any, rng: random.Random) -> Any:
    if isinstance(dim, list):
        return rng.choice(dim)
    (kind, (lo, hi)), = dim.items()
    if kind == "uniform":
        return rng.uniform(float(lo), float(hi))
    return math.exp(rng.uniform(math.log(float(lo)), math.log(float(hi))))


def _centre(dim: Any, value: Any) -> Any:
    """The base config's value when the dimension holds it, else the dimension's middle."""
    if isinstance(dim, list):
        return value if value in dim else dim[len(dim) // 2]
    (kind, (lo, hi)), = dim.items()
    if float(lo) <= float(value) <= float(hi):
        return value
    return math.sqrt(float(lo) * float(hi)) if kind == "loguniform" else (float(lo) + float(hi)) / 2


def check_grid(space: dict[str, Any]) -> None:
    """A grid is the product of lists: a range (uniform, loguniform) has no finite product."""
    ranges = [k for k, d in space.items() if not isinstance(d, list)]
    if ranges:
        raise ValueError(f"--grid needs every dimension to be a list of values; {', '.join(ranges)} is a range")


def sample_configs(space: dict[str, Any], centre: dict[str, Any], n: int, seed: int = 0,
                   grid: bool = False) -> list[dict]:
    """The configurations to try: the whole product (``grid``), else the centre then random draws
    (distinct while the space allows)."""
    check_space(space)
    if not space:
        return [{}]
    if grid:
        check_grid(space)
        return [dict(zip(space, combo)) for combo in itertools.product(*space.values())]
    rng = random.Random(seed)
    configs = [{k: _centre(d, centre[k]) for k, d in space.items()}]
    size = space_size(space)
    seen = {tuple(configs[0].values())}  # a finite space's draws are kept distinct
    while len(configs) < min(n, size):
        draw = {k: _draw(d, rng) for k, d in space.items()}
        if size == math.inf or tuple(draw.values()) not in seen:
            seen.add(tuple(draw.values()))
            configs.append(draw)
    return configs[:n]


def describe(params: dict[str, Any]) -> str:
    """``heads=4 layers=2 beta_com=0.1``: a configuration as the console and the table name it."""
    return " ".join(f"{SHORT.get(k, k)}={v:g}" if isinstance(v, float) else f"{SHORT.get(k, k)}={v}"
                    for k, v in params.items()) or "defaults"
