"""A checkpoint logged as written stays loadable after any later interrupt, a step is never saved
twice, and a folder without a complete model is refused before anything starts (issue 60, 1)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from local_helpers import PAD_ID, tiny_llama

import evolving_rl.local.trainer as trainer_module
from evolving_rl.config import parse_config
from evolving_rl.local.checkpoints import STATE_FILE, incomplete_reason
from evolving_rl.local.checkpoints import main as checkpoint_check
from evolving_rl.local.job import JobResult, _maybe_checkpoint
from evolving_rl.local.model import load_model
from evolving_rl.local.preflight import model_problems
from evolving_rl.local.trainer import GRPOTrainer


def _trainer(loss_cfg, local_cfg) -> GRPOTrainer:
    model = tiny_llama(0)
    return GRPOTrainer(model, copy.deepcopy(model).requires_grad_(False), loss_cfg, local_cfg,
                       pad_id=PAD_ID)


def test_a_kill_during_a_resave_leaves_the_saved_checkpoint_loadable(
        loss_cfg, local_cfg, batch, tmp_path, monkeypatch):
    trainer = _trainer(loss_cfg, local_cfg)
    trainer.step(batch)
    folder = trainer.save(tmp_path / "step_0001")
    weights = (folder / "model.safetensors").read_bytes()

    def killed(_state, path) -> None:  # the process dies with the state file half written
        Path(path).write_bytes(b"")
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer_module.torch, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        trainer.save(folder)
    assert incomplete_reason(folder, trainer_state=True) is None
    assert (folder / "model.safetensors").read_bytes() == weights
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_0001"]  # no staging left
    monkeypatch.undo()
    resumed = GRPOTrainer(load_model(folder), trainer.ref_model, loss_cfg, local_cfg,
                          pad_id=PAD_ID)
    resumed.load_state(folder)
    assert resumed.step_count == 1


def test_the_final_stage_does_not_save_a_step_saved_already(tmp_path):
    saved: list[Path] = []
    trainer = SimpleNamespace(step_count=4, save=lambda folder, _tok: saved.append(folder)
                              or folder)
    models = SimpleNamespace(trainer=trainer, tokenizer=None)
    cfg = SimpleNamespace(local=SimpleNamespace(checkpoint_every=2))
    result = JobResult(run_dir=tmp_path)
    _maybe_checkpoint(cfg, models, result)  # step 4: checkpoint_every divides it
    _maybe_checkpoint(cfg, models, result, final=True)
    assert saved == [tmp_path / "checkpoints" / "step_0004"]


def _model_folder(folder: Path) -> Path:
    tiny_llama(0).save_pretrained(folder)
    torch.save({"step": 1}, folder / STATE_FILE)
    return folder


@pytest.mark.parametrize(("damage", "reason"), [
    (lambda f: (f / "config.json").write_bytes(b""), "config.json does not parse"),
    (lambda f: (f / "model.safetensors").unlink(), "no weights"),
    (lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes()[:999]),
     "model.safetensors is cut short"),
    (lambda f: (f / STATE_FILE).write_bytes(b""), f"{STATE_FILE} is cut short (0 bytes)"),
])
def test_an_incomplete_folder_is_named_with_what_is_wrong(tmp_path, damage, reason):
    folder = _model_folder(tmp_path / "ckpt")
    assert incomplete_reason(folder, trainer_state=True) is None
    damage(folder)
    assert reason in str(incomplete_reason(folder, trainer_state=True))


def test_resume_from_an_incomplete_checkpoint_is_refused_by_the_preflight(tmp_path):
    folder = _model_folder(tmp_path / "ckpt")
    (folder / STATE_FILE).write_bytes(b"")
    cfg = parse_config({"local": {"resume_from": str(folder)}})
    found = [p for p in model_problems(cfg) if p.startswith("local.resume_from")]
    assert found == [f"local.resume_from: no checkpoint to resume from in {folder} "
                     f"({STATE_FILE} is cut short (0 bytes)); give a complete one"]


def test_the_command_check_exits_2_naming_the_folder(tmp_path, capsys):
    folder = _model_folder(tmp_path / "ckpt")
    assert checkpoint_check([str(folder)]) == 0
    (folder / "config.json").write_text(json.dumps([1]))
    capsys.readouterr()
    assert checkpoint_check([str(folder)]) == 2
    assert capsys.readouterr().err == (f"{folder} is no complete checkpoint: config.json is not "
                                       "a JSON object\n")
