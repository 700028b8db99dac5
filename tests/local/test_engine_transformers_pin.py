"""The local engine under the transformers that SGLang pins (5.12.1 for SGLang 0.5.15.post1), which
the slime image's wheelhouse installs over the image's own: its abstract cache layer asks for
`get_max_cache_shape` where the venv's asks for `get_max_length`, and a `SlotLayer` lacking it
could not be built, so the static decoder failed at its first request.

A child pytest (tests/slime_upstream/child_pytest.py) runs the engine's decode tests with the
overlay's transformers (scripts/upstream_overlay.sh) first on the path, nothing else of the
overlay: `test_decode_static.py` (static slots against the growing cache, greedy and sampled:
prefill, decode steps, slot reuse, prefix reuse across turns, the capacity limit) and
`test_decode_architectures.py` (both decoders' log-probs against transformers' full forward on
tiny random Llama and Qwen2, greedy rows its argmax; prefix reuse; the trainer's log-probs). Every
one of them must run and pass, and the child must have imported the overlay's pinned version.
Without the overlay this skips; on CI it fails (tests/upstream.py). A child process: not in the
quick tier (tests/conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import upstream
from tests.slime_upstream import child_pytest

pytestmark = pytest.mark.end_to_end
HERE = Path(__file__).resolve().parent
# at least this many tests per module run on the CPU (the GPU ones are deselected)
MODULES = {"test_decode_static.py": 9, "test_decode_architectures.py": 12}
VERSION = "import transformers; print(transformers.__version__, transformers.__file__)"


def _pinned_transformers(overlay: Path) -> str:
    """The transformers version the overlay's pins name."""
    pins = dict(pin.split("==") for pin in (overlay / ".pins").read_text().split())
    return pins["transformers"]


def _pinned_env(overlay: Path) -> dict[str, str]:
    """The overlay's packages first, then the project: transformers is the overlay's."""
    paths = [overlay, upstream.ROOT / "src", upstream.ROOT]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths)),
            **upstream.bytecode_env()}


def test_engine_decodes_under_sglangs_transformers(tmp_path):
    overlay = upstream.overlay_dir()
    env = _pinned_env(overlay)
    seen = subprocess.run([sys.executable, "-c", VERSION], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert seen.returncode == 0, seen.stderr[-3000:]
    version, module = seen.stdout.split()
    assert version == _pinned_transformers(overlay)
    assert Path(module).is_relative_to(overlay)
    run = child_pytest.run([*(str(HERE / name) for name in MODULES), "-x", "-o",
                            "addopts=-m 'not slow and not gpu' --timeout=120",
                            f"--confcutdir={HERE}", f"--basetemp={tmp_path / 'tmp'}"],
                           cwd=upstream.ROOT, env=env, report=tmp_path / "report.xml")
    assert run.named("failed") == set() and run.named("skipped") == set(), run.log
    for name, least in MODULES.items():
        ran = [test for test in run.outcomes if test.startswith(f"{Path(name).stem}::")]
        assert len(ran) >= least, run.log
