"""Tune profiles: what `localspec tune` chose for a target, saved beside it as '<file>.tune.json'
(a model another app keeps: in the store, profile_path).

A profile keeps one entry per decoding mode (greedy, sampled): acceptance differs between them.
Commands that load the target take the settings the user did not give from the entry of their mode.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from . import discovery, models, naming
from .config import ModelError

PROFILE_SUFFIX = ".tune.json"
PROFILE_VERSION = 1
CHOICES = ("model", "ngram", "hybrid", "none")  # "none": target only


class ProfileError(ValueError):
    """A profile that cannot be used or saved; str() is one line naming the file and the fix."""


@dataclass(frozen=True)
class Choice:
    """What a profile sets for its target: drafter, draft file, γ and draft layers on the GPU."""

    drafter: str               # "model", "ngram", "hybrid" or "none" (target only)
    draft: Path | None
    gamma: int | None          # None: auto
    ngl_draft: int = 0
    temperature: float = 0.0
    p_min: float | None = None  # None: auto, as GenerationConfig
    tokens_per_s: float | None = None
    target_only_tokens_per_s: float | None = None
    confirmed: bool = True
    tuned_at: str = ""
    path: Path | None = None   # the profile file it came from

    def settings(self) -> dict:
        """The settings it stands for: the draft file (None: no draft), the GenerationConfig fields
        drafter, gamma and p_min, and ngl_draft (LoadOptions)."""
        if self.drafter == "none":
            return {"draft": None, "gamma": 0}
        settings = {"draft": self.draft, "drafter": self.drafter, "gamma": self.gamma}
        if self.draft is not None:
            settings.update(ngl_draft=self.ngl_draft, p_min=self.p_min)
        return settings


def describe(choice: Choice) -> str:
    """'drafter model, draft x.gguf, gamma 3' / 'target only'."""
    if choice.drafter == "none":
        return "target only"
    draft = f", draft {choice.draft.name}" if choice.draft else ""
    return f"drafter {choice.drafter}{draft}, gamma {'auto' if choice.gamma is None else choice.gamma}"


def profile_path(target: Path) -> Path:
    """A target's profile: beside it, '<target file name>.tune.json'; for a file another app keeps
    (discovery.kept_by_app: Ollama, the Hugging Face cache, LM Studio), in the store's .profiles
    folder, its name led by a digest of the file's real path. Beside a model of Ollama's, a profile
    lay among its blobs, which Ollama empties of every file not named as a blob when it starts."""
    target = Path(target)
    if discovery.kept_by_app(target):
        digest = hashlib.sha256(str(target.resolve()).encode()).hexdigest()[:16]
        return models.store_dir() / ".profiles" / f"{digest}-{target.name}{PROFILE_SUFFIX}"
    return target.with_name(target.name + PROFILE_SUFFIX)


def mode_of(temperature: float) -> str:
    """Profiles keep greedy and sampled decoding apart: acceptance differs between them."""
    return "greedy" if temperature == 0 else "sampled"


def save_profile(target: Path, choice: Choice, rows: Sequence[dict] = (), costs: dict | None = None) -> Path:
    """Write choice into target's profile (the other mode's entry is kept), atomically."""
    path = profile_path(target)
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
        modes = data.get("modes") if isinstance(data.get("modes"), dict) else {}
    except (OSError, ValueError):
        modes = {}  # unreadable: replaced by this tune
    draft = None
    if choice.draft is not None:
        beside = choice.draft.parent.resolve() == path.parent.resolve()
        draft = choice.draft.name if beside else str(choice.draft.resolve())
    modes[mode_of(choice.temperature)] = {
        "drafter": choice.drafter, "draft": draft, "gamma": choice.gamma, "ngl_draft": choice.ngl_draft,
        "temperature": choice.temperature, "p_min": choice.p_min, "tokens_per_s": choice.tokens_per_s,
        "target_only_tokens_per_s": choice.target_only_tokens_per_s, "confirmed": choice.confirmed,
        "tuned_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "costs": costs or {},
        "candidates": list(rows)}
    data = {"localspec_profile": PROFILE_VERSION, "target": Path(target).name,
            "target_size": Path(target).stat().st_size, "modes": modes}
    models.atomic_write(path, json.dumps(data, indent=2) + "\n",
                        fix="put the target in a writable model store (LOCALSPEC_MODELS) to save its profile")
    return path


def load_profile(target: Path, temperature: float) -> Choice | None:
    """The saved choice for target at this temperature's mode; None when there is none.

    Raises ProfileError for a profile that cannot be used: unreadable, made for another file of the
    same name, or naming a draft that is gone."""
    path = profile_path(target)
    if not path.is_file():
        return None
    again = "run `localspec tune` again, or delete it"
    try:
        data = json.loads(path.read_text())
        entry = data["modes"].get(mode_of(temperature))
        if entry is None:
            return None
        choice = _choice_of(entry, path)
        size = data["target_size"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ProfileError(f"Cannot read the tune profile {path} ({type(e).__name__}: {e}); {again}") from None
    if size != Path(target).stat().st_size:
        raise ProfileError(f"The tune profile {path} was made for another file named {Path(target).name}; {again}")
    needs_draft = choice.drafter in ("model", "hybrid")
    if choice.drafter not in CHOICES or needs_draft != (choice.draft is not None):
        raise ProfileError(f"The tune profile {path} has an unknown drafter {choice.drafter!r}; {again}")
    if choice.draft is not None and not choice.draft.is_file():
        raise ProfileError(f"The tune profile {path} names a draft that is gone ({choice.draft}); {again}")
    return choice


def _choice_of(entry: dict, path: Path) -> Choice:
    """A mode's entry of the profile at path as a Choice (a relative draft lies beside the profile).
    Each value must be of the type and range tune writes (ValueError): an edited or damaged one
    was a traceback later (a speed as a string) or read as something else (γ 3.7 as 3)."""
    draft = (path.parent / entry["draft"]) if entry["draft"] else None
    return Choice(entry["drafter"], draft, _optional(_whole, "gamma", entry["gamma"]),
                  _whole("ngl_draft", entry.get("ngl_draft", 0)), _number("temperature", entry["temperature"], 0.0),
                  _optional(_number, "p_min", entry.get("p_min"), 0.0, 1.0),
                  _optional(_speed, "tokens_per_s", entry.get("tokens_per_s")),
                  _optional(_speed, "target_only_tokens_per_s", entry.get("target_only_tokens_per_s")),
                  _typed("confirmed", entry.get("confirmed", True), bool),
                  _typed("tuned_at", entry.get("tuned_at", ""), str), path)


def _optional(check, key: str, value, *bounds):
    """None, or value as check(key, value, *bounds) takes it."""
    return None if value is None else check(key, value, *bounds)


def _typed(key: str, value, kind: type):
    if not isinstance(value, kind):
        raise ValueError(f"{key} is {value!r}, not a {kind.__name__}")
    return value


def _whole(key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} is {value!r}, not a whole number >= 0")
    return value


def _speed(key: str, value) -> float:
    speed = _number(key, value, 0.0)
    if speed == 0.0:
        raise ValueError(f"{key} is 0")
    return speed


def _number(key: str, value, low: float, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high \
            or not math.isfinite(value):
        raise ValueError(f"{key} is {value!r}, not a number from {low:g}" + (f" to {high:g}" if high < math.inf else ""))
    return float(value)


def merge_profile(choice: Choice, given: dict, explicit: set[str]) -> tuple[dict, str]:
    """(settings to apply, a 'profile: ...' line for --stats): the profile fills the settings the user
    did not give, and stands aside when the user's draft or drafter differs from its own.

    given: the command's settings by name (draft as the user named it); explicit: those the user set."""
    mine = choice.settings()
    where = f"{choice.path}" if choice.path else "the profile"
    if "draft" in explicit and not _same_draft(given.get("draft"), choice.draft):
        return {}, f"profile: not used, --draft differs from its {describe(choice)} ({where})"
    if "drafter" in explicit and given.get("drafter") != choice.drafter:
        return {}, f"profile: not used, --drafter differs from its {describe(choice)} ({where})"
    if choice.drafter == "none" and "gamma" in explicit and given.get("gamma") != 0:
        return {}, f"profile: not used, --gamma asks for drafting but it chose target only ({where})"
    updates = {k: v for k, v in mine.items() if k in given and k not in explicit}
    kept = sorted(k for k in mine if k in explicit)
    speed = ""
    if choice.tokens_per_s and choice.target_only_tokens_per_s:
        ratio = choice.tokens_per_s / choice.target_only_tokens_per_s
        speed = f": {choice.tokens_per_s:.1f} tok/s, {ratio:.2f}x target-only"
    note = f"profile: {describe(choice)} (tuned at T={choice.temperature:g}{speed}; {where})"
    if kept:
        note += "; your " + ", ".join("--" + k.replace("_", "-") for k in kept) + " kept"
    return updates, note


def _same_draft(given: str | None, draft: Path | None) -> bool:
    """Whether the user's draft (a name or path; 'none' matches no draft) names the profile's draft file."""
    if given is None or models.names_no_draft(given):
        return draft is None
    if draft is None:
        return False
    try:
        return os.path.samefile(naming.resolve_model(str(given), pull_missing=False), draft)
    except (ModelError, OSError):
        return False
