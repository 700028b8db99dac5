"""Every protocol on every split, resumable: what one `python -m evolving_rl.evaluate` run does.

Owns `EvalRequest` (splits, protocols, repeats, task limit, retrieval and training splits, the
persisted library, the output folder, whether to start the servers, whether to forget the
finished cases) and `run_evaluation` (its
`EvalOutcome`); each split's first `limit` tasks are taken round-robin over task types
(`retrieval.prepared.round_robin`). The protocols of a split run at once, so that their
episodes share the policy's batches (the concurrency bounds of `pipeline` hold over them all).
Finished cases go to `<out>/cases.jsonl` as they finish (`pipeline.eval_records.CaseStore`),
under the key of what they are computed from (`evaluate.provenance`: the policy's files, the
settings that change an episode, the protocol settings, the prepared data and the game or task
files its rows point to, and the package's code); a rerun with the same key skips them, and the
numbers are computed from the records alone, so an interrupted run, resumed, reports what an
uninterrupted one would; when every case is already there, nothing starts (no retrieval cache,
server or model). A store of another key (another checkpoint in a folder of the same name, a
changed setting, data set, game file or source file) or of none (written before the key) is
never reused: it is set aside as `cases-<its key>.jsonl` before the run starts. With
`start_servers`, the retrieval cache is refreshed and the retrieval and environment servers are
started with this config and stopped on exit (`local.servers`, as the local job does); otherwise
the config's addresses must answer. A missing `--local` checkpoint or `--tokenizer` folder fails
first, before a stored case is read; a protocol the environment's adapter cannot run
(`pipeline.evaluation.check_supported`) fails before anything starts. When cases remain to run,
the devices they need are checked before the store is touched or anything starts
(`UnusableDeviceError`, with the preflight's rule `local.preflight.device_problem`): a `--local`
policy's device, and `retrieval.device` when the servers are started here; a finished
evaluation needs neither, so its stored cases are reported on any machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from evolving_rl.clients.policy import PolicyClient
from evolving_rl.clients.tokenizer import ChatTokenizer
from evolving_rl.config.schema import Config
from evolving_rl.domains.base import EnvironmentAdapter
from evolving_rl.domains.registry import domain_for
from evolving_rl.evaluate.policies import PolicySpec, open_policy
from evolving_rl.evaluate.provenance import EvalKey, eval_key
from evolving_rl.pipeline.context import build_context, make_adapter
from evolving_rl.pipeline.eval_records import CaseRecord, CaseStore
from evolving_rl.pipeline.eval_report import summarize
from evolving_rl.pipeline.evaluation import (
    EvalPlan,
    EvalProtocol,
    check_supported,
    evaluate_cases,
)
from evolving_rl.pipeline.skill_library import SkillLibrary
from evolving_rl.retrieval.prepared import PreparedData, environment_prepared_dir, round_robin

logger = logging.getLogger(__name__)
T = TypeVar("T")

CASES_FILE = "cases.jsonl"
# Opens (policy, chat tokenizer) for the run and releases them on exit.
PolicyOpener = Callable[[], AbstractAsyncContextManager[tuple[PolicyClient, ChatTokenizer]]]


class MissingSplitError(FileNotFoundError):
    """A split to evaluate (or the training split) has no prepared file."""


class UnusableDeviceError(ValueError):
    """A device the run needs is one torch cannot use on this machine."""


@dataclass(frozen=True)
class EvalRequest:
    """What to evaluate and where to write it (module docstring)."""

    out_dir: Path
    splits: tuple[str, ...]
    protocols: tuple[EvalProtocol, ...] = (EvalProtocol.REFERENCE,)
    repeats: int = 3
    limit: int | None = None
    retrieval_split: str = "train"
    train_split: str = "train"
    library: Path | None = None
    start_servers: bool = True
    fresh: bool = False

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError("repeats must be >= 1")
        if EvalProtocol.LIBRARY in self.protocols and self.library is None:
            raise ValueError("the library protocol needs --library (a skill_library.jsonl)")


def _read_prepared(cfg: Config, request: EvalRequest) -> PreparedData:
    """The prepared data, each file parsed once; a split the request needs must be there."""
    prepared = environment_prepared_dir(cfg)
    for split in (*request.splits, request.train_split):
        if not (Path(prepared) / f"{split}.jsonl").is_file():
            raise MissingSplitError(
                f"no prepared split {split!r} in {prepared}: prepare the {cfg.environment} data "
                f"first ({domain_for(cfg).prepare_command}; the README says how)")
    return PreparedData.read(cfg)


@contextlib.contextmanager
def _services(cfg: Config, start: bool, prepared: PreparedData) -> Iterator[None]:
    if not start:
        yield
        return
    from evolving_rl.local.servers import build_retrieval_cache, servers

    build_retrieval_cache(cfg, prepared)
    with servers(cfg):
        yield


def _adapter(cfg: Config) -> EnvironmentAdapter:
    """Lenient parsing where the profile asks for it (the CPU profiles' small model), as the
    local job plays."""
    return make_adapter(cfg, lenient=cfg.local.lenient_actions)


_STOPPED = object()


def run_stoppable(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, where a SIGTERM (in the main thread) cancels `main` instead of
    raising in whichever task runs: its cases unwind, the clients close after them (`_settle`),
    then `SystemExit("signal 15")` is raised outside the loop, as `env.launch`'s handler would,
    with no traceback. The SIGTERM handler in place before is restored on return."""
    async def guarded() -> object:
        task, stopped = asyncio.current_task(), []
        if threading.current_thread() is not threading.main_thread() or task is None:
            return await main
        loop, previous = asyncio.get_running_loop(), signal.getsignal(signal.SIGTERM)
        loop.add_signal_handler(signal.SIGTERM, lambda: (stopped.append(1), task.cancel()))
        try:
            return await main
        except asyncio.CancelledError:
            if stopped:
                return _STOPPED
            raise
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
            if previous is not None:  # None: not set from Python; SIGTERM keeps its default
                signal.signal(signal.SIGTERM, previous)

    result = asyncio.run(guarded())
    if result is _STOPPED:
        raise SystemExit(f"signal {int(signal.SIGTERM)}")
    return result  # type: ignore[return-value]


async def _settle(tasks: list[asyncio.Task]) -> None:
    """Cancel the tasks still running and wait until each has ended (its cleanup included):
    a SIGTERM (`SystemExit` in one of them) or an error must not close the clients under the
    episodes still unwinding, each of which would log a `Session is closed` traceback. A task
    cancelled already (by `asyncio.run` on SIGTERM, say) is not cancelled again: that would
    interrupt its cleanup (`Task.cancelling`, Python 3.11; on 3.10 it is cancelled again)."""
    for task in tasks:
        if not task.done() and not getattr(task, "cancelling", lambda: 0)():
            task.cancel()
    if tasks:
        await asyncio.wait(tasks)


async def _evaluate(cfg: Config, opener: PolicyOpener, request: EvalRequest,
                    prepared: PreparedData, rows: dict[str, list[dict[str, Any]]],
                    train_types: frozenset[str], store: CaseStore
                    ) -> dict[str, dict[str, dict[str, float]]]:
    library = SkillLibrary(request.library) if request.library else None
    results: dict[str, dict[str, dict[str, float]]] = {}
    async with opener() as (policy, tokenizer):
        ctx = await build_context(cfg, policy, tokenizer, adapter=_adapter(cfg),
                                  run_dir=request.out_dir, prepared=prepared)

        async def one(split: str, protocol: EvalProtocol) -> None:
            plan = EvalPlan(protocol=protocol, split=split,
                            retrieval_split=request.retrieval_split, train_types=train_types,
                            library=library, store=store, progress=True)
            records, failed = await evaluate_cases(ctx, rows[split], request.repeats, plan)
            metrics = summarize(records, ctx.adapter.eval_metrics, train_types)
            metrics["eval/retrieval_failed"] = float(failed)
            results.setdefault(split, {})[str(protocol)] = metrics

        running: list[asyncio.Task] = []
        try:
            for split in rows:  # a split's protocols at once: their episodes share the batches
                running = [asyncio.ensure_future(one(split, protocol))
                           for protocol in request.protocols]
                await asyncio.gather(*running)
        finally:
            await _settle(running)  # the clients close only once nothing runs on them
            await ctx.close()
    return {split: {str(p): results[split][str(p)] for p in request.protocols}
            for split in results}


@dataclass(frozen=True)
class EvalOutcome:
    """split -> protocol -> flat metrics (`pipeline.eval_report`), the training types, and what
    the cases were computed from."""

    results: dict[str, dict[str, dict[str, float]]]
    train_types: frozenset[str]
    key: EvalKey


def run_evaluation(cfg: Config, spec: PolicySpec, request: EvalRequest,
                   opener: PolicyOpener | None = None) -> EvalOutcome:
    """Run the request (module docstring) with the policy of `spec`, opened by `opener` when
    given (tests pass scripted policies); cases in `<out>/cases.jsonl`, under `spec`'s key."""
    spec.check_exists()  # a missing checkpoint: before any stored case is read
    domain_for(cfg)  # an unregistered environment fails before anything starts
    adapter = _adapter(cfg)
    for protocol in request.protocols:
        check_supported(adapter, protocol)
    prepared = _read_prepared(cfg, request)
    rows = {split: round_robin(prepared.environment[split], request.limit)
            for split in request.splits}
    train_types = frozenset(row.task_type for row in prepared.environment[request.train_split])
    key = eval_key(cfg, spec, {split: prepared.environment[split] for split in request.splits},
                   request.train_split, request.retrieval_split, request.library)
    store = CaseStore(request.out_dir / CASES_FILE, key.key)
    finished = {} if request.fresh else _finished_cases(adapter, request, rows, store)
    if finished and all(len(records) == _n_cases(rows[split], request)
                        for (split, _protocol), records in finished.items()):
        logger.info("all %d cases are already in %s: nothing to run, no server or model started",
                    sum(map(len, finished.values())), store.path)
        return EvalOutcome(_summaries(adapter, finished, train_types), train_types, key)
    _check_devices(cfg, spec, request)  # before the store is touched or anything starts
    if request.fresh:
        store.path.unlink(missing_ok=True)
    store.set_aside()
    request.out_dir.mkdir(parents=True, exist_ok=True)
    with _services(cfg, request.start_servers, prepared):
        results = run_stoppable(_evaluate(cfg, opener or (lambda: open_policy(spec, cfg)), request,
                                        prepared, rows, train_types, store))
    return EvalOutcome(results, train_types, key)


def _check_devices(cfg: Config, spec: PolicySpec, request: EvalRequest) -> None:
    """`UnusableDeviceError` naming every device the run needs that torch cannot use here."""
    from evolving_rl.local.preflight import device_problem

    found = (device_problem("--device", spec.device, option="--device ")
             if spec.kind == "local" else None,
             device_problem("retrieval.device", cfg.retrieval.device)
             if request.start_servers else None)
    problems = [problem for problem in found if problem]
    if problems:
        raise UnusableDeviceError(
            f"the evaluation did not start; {request.out_dir / CASES_FILE} is untouched and no "
            "server was started: " + "; ".join(problems))


def _n_cases(rows: list[dict[str, Any]], request: EvalRequest) -> int:
    return len(rows) * request.repeats


def _finished_cases(adapter: EnvironmentAdapter, request: EvalRequest,
                    rows: dict[str, list[dict[str, Any]]], store: CaseStore
                    ) -> dict[tuple[str, str], list[CaseRecord]]:
    """(split, protocol) -> the request's cases already in the store under its key."""
    done = store.load()
    finished: dict[tuple[str, str], list[CaseRecord]] = {}
    for split, split_rows in rows.items():
        ids = [adapter.task_from_row(row).id for row in split_rows]
        for protocol in map(str, request.protocols):
            keys = [(protocol, split, task_id, r) for r in range(request.repeats)
                    for task_id in ids]
            finished[(split, protocol)] = [done[key] for key in keys if key in done]
    return finished


def _summaries(adapter: EnvironmentAdapter, finished: dict[tuple[str, str], list[CaseRecord]],
               train_types: frozenset[str]) -> dict[str, dict[str, dict[str, float]]]:
    """The report's numbers from stored records alone, as `_evaluate` computes them (no
    retrieval ran, so none failed)."""
    results: dict[str, dict[str, dict[str, float]]] = {}
    for (split, protocol), records in finished.items():
        metrics = summarize(records, adapter.eval_metrics, train_types)
        metrics["eval/retrieval_failed"] = 0.0
        results.setdefault(split, {})[protocol] = metrics
    return results
