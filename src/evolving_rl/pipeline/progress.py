"""A progress bar for pipeline work whose unit takes minutes (an evaluation case, a rollout).

Owns `live_bar`: a tqdm bar that, between the unit's updates, shows every few seconds how many
model replies and env calls the work has made so far (`IOClock.calls`), so that minutes of
concurrent episodes are never silent, and opens with the units already done (a resumed run says
how many it found).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from tqdm import tqdm

from evolving_rl.pipeline.timing import IOClock


async def _tick(bar: tqdm, clock: IOClock, every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        bar.set_postfix_str(f"{clock.calls['policy']} model replies, {clock.calls['env']} env "
                            "calls")


@contextlib.asynccontextmanager
async def live_bar(clock: IOClock, *, total: int, done: int, desc: str, unit: str,
                   enabled: bool = True, every_s: float = 5.0) -> AsyncIterator[tqdm]:
    """A bar of `total` units starting at `done`, its postfix refreshed from `clock`."""
    with tqdm(total=total, initial=done, desc=desc, unit=unit, disable=not enabled) as bar:
        if done:
            bar.set_postfix_str(f"{done} done before this run")
        ticker = asyncio.ensure_future(_tick(bar, clock, every_s)) if enabled else None
        try:
            yield bar
        finally:
            if ticker is not None:
                ticker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ticker
