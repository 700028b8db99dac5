"""The main job's KL reference: a frozen copy of the policy just loaded (weights loaded once, one
"Loading weights" bar), loaded from the initial weights only when the policy resumes."""

from __future__ import annotations

from pathlib import Path

import torch
from local_helpers import tiny_llama

from evolving_rl.config.schema import LocalConfig
from evolving_rl.local import job


def test_reference_is_a_frozen_copy_without_a_second_load(monkeypatch):
    def no_load(*args, **kwargs):
        raise AssertionError("the initial weights were loaded twice")

    monkeypatch.setattr(job, "load_model", no_load)
    model = tiny_llama()
    ref = job.reference_model(model, Path("m"), Path("m"), LocalConfig())
    assert ref is not model and not ref.training
    assert not any(p.requires_grad for p in ref.parameters())
    assert all(p.requires_grad for p in model.parameters())
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        assert torch.equal(p, q) and p.data_ptr() != q.data_ptr(), name


def test_a_resumed_policy_gets_the_initial_weights_as_reference(monkeypatch):
    loads = []
    monkeypatch.setattr(job, "load_model", lambda *args, **kwargs: loads.append((args, kwargs)))
    job.reference_model(tiny_llama(), Path("m"), Path("run/step_0002"), LocalConfig())
    assert loads == [((Path("m"), "cpu", "float32"), {"trainable": False})]
