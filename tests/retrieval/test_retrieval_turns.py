"""Turns at the encoder's model: a small request is not starved by large ones (no model: a fake
whose `encode` the test holds), the work one request may ask is bounded, and closing the turns
answers every waiter at once while the turn held runs on."""

from __future__ import annotations

import threading
import time

import numpy as np

from evolving_rl.retrieval.encoder import Encoder
from evolving_rl.retrieval.turns import Turns, TurnsClosed

WAIT_S = 30.0


def _until(condition) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_the_waiter_with_least_work_left_goes_first_ties_by_arrival():
    turns, order = Turns(), []
    started = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with turns.turn(10):
            started.set()
            release.wait(WAIT_S)

    def waiter(name: str, work: int) -> None:
        with turns.turn(work):
            order.append(name)

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    started.wait(WAIT_S)
    for i, (name, work) in enumerate([("big", 500), ("small", 3), ("small too", 3)]):
        threads.append(threading.Thread(target=waiter, args=(name, work)))
        threads[-1].start()
        _until(lambda i=i: turns.waiting == i + 1)
    release.set()
    for thread in threads:
        thread.join(WAIT_S)
    assert order == ["small", "small too", "big"]


def test_close_refuses_the_waiters_at_once_and_lets_the_turn_held_run_on():
    turns, outcome = Turns(), {}
    started, release = threading.Event(), threading.Event()

    def holder() -> None:
        with turns.turn(10):
            started.set()
            release.wait(WAIT_S)
            outcome["holder"] = "ran"

    def waiter(name: str) -> None:
        try:
            with turns.turn(1):
                outcome[name] = "ran"
        except TurnsClosed:
            outcome[name] = "refused"

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    started.wait(WAIT_S)
    for i, name in enumerate(("a", "b")):
        threads.append(threading.Thread(target=waiter, args=(name,)))
        threads[-1].start()
        _until(lambda i=i: turns.waiting == i + 1)
    turns.close()
    for thread in threads[1:]:
        thread.join(WAIT_S)
    assert outcome == {"a": "refused", "b": "refused"} and turns.waiting == 0  # turn still held
    release.set()
    turns.wait_idle()
    assert outcome["holder"] == "ran"
    waiter("late")
    assert outcome["late"] == "refused"


class HeldModel:
    """A stand-in for a sentence-transformers model: one token per word, and `encode` records
    each batch and holds the first one until the test releases it."""

    max_seq_length = 64
    prompts: dict[str, str] = {}

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.first_running = threading.Event()
        self.release = threading.Event()

    def tokenizer(self, texts, **_kwargs):
        return {"input_ids": [text.split()[:self.max_seq_length] for text in texts]}

    def get_embedding_dimension(self) -> int:
        return 4

    def encode(self, texts, **_kwargs):
        self.batches.append(list(texts))
        if len(self.batches) == 1:
            self.first_running.set()
            self.release.wait(WAIT_S)
        return np.ones((len(texts), 4), dtype=np.float32)


def test_a_small_request_waits_for_one_batch_of_a_large_one():
    model = HeldModel()
    encoder = Encoder(model, "held", batch_size=64, batch_tokens=16)
    large = [f"large text {i} " + "word " * 12 for i in range(8)]  # 15 tokens: a batch each
    runner = threading.Thread(target=encoder.encode_queries, args=(large,))
    runner.start()
    model.first_running.wait(WAIT_S)
    small = threading.Thread(target=encoder.encode_queries, args=(["a small query"],))
    small.start()
    _until(lambda: encoder.waiting == 1)
    model.release.set()
    runner.join(WAIT_S)
    small.join(WAIT_S)
    assert len(model.batches) == 9 and model.batches[1] == ["a small query"]
