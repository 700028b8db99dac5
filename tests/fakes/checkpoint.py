"""A stand-in `--local` checkpoint folder (a config.json and a weights file) and its
`PolicySpec`: what an evaluation's cases are keyed by when a scripted policy is opened in its
place (`evaluate.runner.run_evaluation(..., opener=...)`)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from evolving_rl.evaluate.policies import PolicySpec


def checkpoint_spec(folder: Path, weights: bytes = b"weights") -> PolicySpec:
    """Write (or overwrite) the folder's files; the spec names it. The weights file is a whole
    safetensors file (the evaluation refuses one cut short) holding `weights` as one tensor."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}", encoding="utf-8")
    header = json.dumps({"w": {"dtype": "U8", "shape": [len(weights)],
                               "data_offsets": [0, len(weights)]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + weights)
    return PolicySpec("local", path=str(folder))
