"""The retrieval stage: the K most similar other tasks of the retrieval split for every task of a
batch, in one `/search` request.

Owns `retrieve`, which the training rollout (stage 3, `rollout`) and the evaluation protocols
(`evaluation`: the top-1 task a test task's skill comes from) both call, so neither imports the
other. The source task itself is excluded unless `pipeline.include_source_in_retrieval`; the
order is `pipeline.retrieval_order`. Hits are mapped back to tasks through the context's task
catalog and ids it does not know are dropped and counted; a failed search gives every task no
retrieved task and says why (`units.Retrieved`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from evolving_rl.clients.http import ServerError, TransportError
from evolving_rl.clients.retrieval import SearchQuery
from evolving_rl.domains.base import TaskSpec
from evolving_rl.pipeline.context import PipelineContext
from evolving_rl.pipeline.timing import IOClock
from evolving_rl.pipeline.units import Retrieved

logger = logging.getLogger(__name__)


async def retrieve(ctx: PipelineContext, clock: IOClock, tasks: Sequence[TaskSpec],
                   top_k: int) -> Retrieved:
    """Top-k other tasks (of the retrieval split) for every task, in one request."""
    pipeline = ctx.cfg.pipeline
    queries = [SearchQuery(task.question,
                           () if pipeline.include_source_in_retrieval else (task.id,))
               for task in tasks]
    try:
        with clock.wait("retrieval"):
            hits = await ctx.retrieval.search(queries, top_k, split=pipeline.retrieval_split,
                                              order=pipeline.retrieval_order)
    except (TransportError, ServerError) as error:
        logger.warning("retrieval failed: %s", error)
        return Retrieved([[] for _ in tasks], str(error))
    out, unknown = [], 0
    for row in hits:
        found = [ctx.catalog.get(hit.id) for hit in row]
        unknown += sum(task is None for task in found)
        out.append([task for task in found if task is not None])
    return Retrieved(out, None, unknown)
