"""The filtered chi-square of tests/test_backend_sampling.py (speculative γ 2 against target-only,
first two tokens, SmolLM2-135M and its Q4_0 copy) with the rows of the speculative side judged in
numpy (backend 0, the default) or by the chain (1, the test that failed on the H100). If numpy rows
fail it on a GPU as well, the target's batch-shape numerics explain the failure, not the chain.

    python scripts/gpu_chisq_check.py 999 1000      # every layer on the GPU, 1,000 seeds a side
    python scripts/gpu_chisq_check.py 999 1000 1    # the chain, as the test
"""
import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "scripts")]
from script_args import Parser  # noqa: E402
_ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
_ap.add_argument("ngl", type=int, help="layers on the GPU (999: all; 0: the CPU)")
_ap.add_argument("n", type=int, help="seeds a side")
_ap.add_argument("backend", nargs="?", default="0", choices=["0", "1"], metavar="backend",
                 help="the speculative side's rows judged in numpy (0, the default) or by the chain (1)")
_args = _ap.parse_args()  # before the imports below: --help answers at once
import localspec  # noqa: E402,F401
from localspec.context import Context  # noqa: E402
from localspec.llama import Model  # noqa: E402
from bench import quick_pair  # noqa: E402
from test_backend_sampling import FILTERED, HOT_FILTERED  # noqa: E402
from test_controller import first_two, model_source, same_distribution_pvalue  # noqa: E402

ngl, n, backend = _args.ngl, _args.n, _args.backend
smol, q40 = quick_pair(Path(tempfile.mkdtemp()))
model = Model(smol, n_gpu_layers=ngl)
target = Context(model, n_ctx=256, n_threads=2)
draft = Context(Model(q40, n_gpu_layers=ngl), n_ctx=256, n_threads=2)
prompt = model.tokenize("My favourite colour is", True)
os.environ["LOCALSPEC_BACKEND_SAMPLING"] = "0"
plain, _ = first_two(target, None, prompt, FILTERED, 0, range(n))
os.environ["LOCALSPEC_BACKEND_SAMPLING"] = backend
spec, drafted = first_two(target, lambda: model_source(draft, HOT_FILTERED), prompt, FILTERED, 2, range(n, 2 * n))
print(f"ngl={ngl} n={n} spec side backend={backend}: drafted={drafted} chain={target.chain_key} "
      f"p={same_distribution_pvalue(plain, spec):.3g}", flush=True)
