"""The real retrieval server (`env.retrieval.server.main`) with its model's `encode` gated, for
the stop test: a deterministic request that outlasts the stop's grace, without timing.

    python -m tests.retrieval.gated_server GATE_DIR --config-json ...

Each `encode` call touches `GATE_DIR/started`, waits (at most `WAIT_S`) for `GATE_DIR/release`,
runs the real encode (native code) and touches `GATE_DIR/finished`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from env.retrieval import server
from evolving_rl.config.schema import RetrievalConfig
from evolving_rl.retrieval.encoder import Encoder, load_encoder

WAIT_S = 120.0
_POLL_S = 0.02


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} not created within {WAIT_S} s")
        time.sleep(_POLL_S)


def gated_loader(gate: Path):
    def load(cfg: RetrievalConfig) -> Encoder:
        encoder = load_encoder(cfg)
        real = encoder.model.encode

        def encode(*args: Any, **kwargs: Any) -> Any:
            (gate / "started").touch()
            _wait_for(gate / "release")
            vectors = real(*args, **kwargs)
            (gate / "finished").touch()
            return vectors

        encoder.model.encode = encode
        return encoder
    return load


if __name__ == "__main__":
    server.load_encoder = gated_loader(Path(sys.argv[1]))
    sys.exit(server.main(sys.argv[2:]))
