"""Prompt sets: a JSONL file of {"prompt": ...} per line, by default the packaged calibration set."""

from __future__ import annotations

import json
from pathlib import Path

CALIBRATION_FILE = Path(__file__).with_name("calibration.jsonl")  # HumanEval/0..7 (MIT, OpenAI)


class PromptsError(ValueError):
    """A prompts file that cannot be used; str() is one line naming the file, the line and the fix."""


def load_prompts(path: Path | None = None, n: int = 8) -> list[str]:
    """The first n prompts of a JSONL file of {"prompt": ...} (default: the 8 calibration prompts)."""
    path = Path(path) if path is not None else CALIBRATION_FILE
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise PromptsError(f"Cannot read the prompts file {path} ({e}); "
                           "give a JSONL file of {\"prompt\": ...}") from None
    prompts = [_prompt_of(line, path, i) for i, line in enumerate(lines[:n], 1)]
    if not prompts:
        raise PromptsError(f"{path} holds no prompts; give a JSONL file of {{\"prompt\": ...}}")
    return prompts


def _prompt_of(line: str, path: Path, i: int) -> str:
    """The non-empty "prompt" string of line i of path, or PromptsError naming the line."""
    try:
        prompt = json.loads(line)["prompt"]
    except (ValueError, KeyError, TypeError):
        prompt = None
    if not isinstance(prompt, str) or not prompt:
        raise PromptsError(f"{path} line {i} is not a JSON object with a non-empty \"prompt\" string: "
                           f"{line[:60]!r}")
    return prompt
