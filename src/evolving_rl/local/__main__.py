"""Entry point of the main job on the embedded default (`scripts/run_local.sh`).

The local backend (in-process policy, GRPO trainer, the end-to-end job) is not built yet: it is
the local-backend issue. Until then this validates the config and says plainly what is missing,
exiting non-zero so that no one mistakes it for a finished run.
"""

from __future__ import annotations

import argparse
import logging
import sys

from evolving_rl.config import ConfigError, load_config

log = logging.getLogger("evolving_rl.local")

NOT_BUILT = (
    "The embedded local backend is not built yet: the in-process SmolLM2 policy, the local GRPO "
    "trainer and the end-to-end job (data generation, retrieval cache, servers, training steps, "
    "before/after evaluation) land with the local-backend issue. Nothing was trained."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default="configs/local_cpu.yaml")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(args.config)
    except ConfigError as err:
        log.error("%s", err)
        return 2
    log.info("config %s is valid (environment=%s)", args.config, cfg.environment)
    log.error(NOT_BUILT)
    return 3


if __name__ == "__main__":
    sys.exit(main())
