"""scripts/bench.py --quick on the tiny models: the report's shape, not its speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_quick_writes_table_and_json(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/bench.py"), "--quick", "--threads", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "| target-only |" in proc.stdout and "| hybrid gamma=auto |" in proc.stdout
    report = json.loads((out / "bench.json").read_text())
    rows = {r["scenario"]: r for r in report["rows"]}
    assert set(rows) == {"target-only", "model gamma=2", "hybrid gamma=auto"}
    assert rows["target-only"]["ratio"] == 1.0 and rows["target-only"]["alpha"] is None
    fixed = rows["model gamma=2"]
    assert fixed["tokens"] == 2 * 16 and 0 <= fixed["alpha"] <= 1 and fixed["mean_accepted_length"] >= 1
    assert all(0 <= r["controller_share"] < 1 and r["tokens_per_s"] > 0 for r in report["rows"])
    assert (out / "bench.md").read_text().startswith("| scenario |")
