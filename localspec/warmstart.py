"""Warm start: the planner's measurements saved per (target, draft, placement, threads, build) in the
model store, so that the next process plans from them at once instead of relearning every cost.

One JSON file per key under <store>/.plans/. A file written for another key, by another version, or
that does not parse is ignored (and replaced by the next save): a stale plan can cost speed, never
correctness, since the planner only decides how much to draft."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from . import __version__, models
from .config import ModelError
from .llama import build_info
from .tracker import CostTracker

FORMAT = 2  # 2: n-gram acceptance buckets tell a match in the prompt from one in the output


def enabled() -> bool:
    """On unless LOCALSPEC_WARM_START=0."""
    return os.environ.get("LOCALSPEC_WARM_START", "1") != "0"


def plan_key(target: Path, draft: Path | None, placement: dict) -> dict:
    """What the measurements depend on: both files (name and size), where each runs, the threads and
    the llama.cpp build."""
    def model(path: Path | None):
        return None if path is None else {"name": Path(path).name, "size": _size(path)}
    return {"format": FORMAT, "localspec": __version__, "build": build_info(), "target": model(target),
            "draft": model(draft), "placement": placement}


def _size(path: Path) -> int | None:
    try:
        return Path(path).stat().st_size
    except OSError:
        return None


def plan_path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return models.store_dir() / ".plans" / f"{digest}.json"


def load(key: dict) -> dict[tuple, CostTracker]:
    """The saved trackers for key, by (drafter name, greedy); empty when none fit."""
    try:
        data = json.loads(plan_path(key).read_text(encoding="utf-8"))
        if data.get("key") != key:
            return {}
        return {(name, mode == "greedy"): CostTracker.from_dict(saved)
                for name_mode, saved in data["trackers"].items() for name, mode in [name_mode.split("/")]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def save(key: dict, trackers: dict[tuple, CostTracker]) -> None:
    """Write the trackers for key (atomically; a store that cannot be written is left alone)."""
    data = {"key": key, "trackers": {f"{name}/{'greedy' if greedy else 'sampled'}": t.to_dict()
                                     for (name, greedy), t in trackers.items()}}
    try:
        models.atomic_write(plan_path(key), json.dumps(data))
    except (OSError, ModelError):
        pass
