"""A SIGTERM to the evaluation cancels it: every case unwinds (its cleanup still reaches the
clients), the clients close after them, and the process ends with `SystemExit("signal 15")` and
no `Session is closed` traceback (issue 60, item 8). The signal is real (sent to this process
from inside a case), under the handler the evaluation's servers install."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from env.launch import stopped_on_sigterm
from evolving_rl.config import parse_config
from evolving_rl.evaluate import runner
from evolving_rl.evaluate.runner import EvalRequest, run_stoppable
from evolving_rl.pipeline.evaluation import EvalProtocol


class Clients:
    """The HTTP clients of a context: used by a case's cleanup, refused once closed."""

    def __init__(self) -> None:
        self.closed = False
        self.cleanups = 0
        self.refused = 0  # cleanups that found the clients closed: a traceback each

    async def close(self) -> None:
        self.closed = True

    def use(self) -> None:
        if self.closed:
            self.refused += 1
            raise RuntimeError("Session is closed")
        self.cleanups += 1


def test_a_sigterm_closes_the_clients_after_the_cases_unwind(tmp_path, monkeypatch):
    clients = Clients()

    async def build_context(*_args, **_kwargs) -> Clients:
        return clients

    async def evaluate_cases(_ctx, _rows, _repeats, plan):
        try:
            if plan.protocol is EvalProtocol.REFERENCE:
                os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.Event().wait()  # a case still playing
        finally:
            await asyncio.sleep(0)  # its cleanup: an env call to end the episode
            await asyncio.sleep(0)
            clients.use()

    monkeypatch.setattr(runner, "build_context", build_context)
    monkeypatch.setattr(runner, "evaluate_cases", evaluate_cases)

    @contextlib.asynccontextmanager
    async def opener():
        yield None, None

    request = EvalRequest(out_dir=tmp_path, splits=("valid_unseen",), repeats=1,
                          protocols=(EvalProtocol.REFERENCE, EvalProtocol.NO_SKILL))
    stopped = ""
    with stopped_on_sigterm():
        handler = signal.getsignal(signal.SIGTERM)
        try:
            run_stoppable(runner._evaluate(parse_config({}), opener, request, None,
                                           {"valid_unseen": []}, frozenset(), None))
        except SystemExit as exit_:
            stopped = str(exit_)
        assert signal.getsignal(signal.SIGTERM) is handler  # restored for the servers' stop
    assert stopped == "signal 15"
    assert (clients.refused, clients.cleanups, clients.closed) == (0, 2, True)
