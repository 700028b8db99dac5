"""What an evaluation's cases are keyed by (`evaluate.provenance`): run-local addresses, thread
counts and locations leave the config digest alone, outcome settings change it; a served
policy is digested by its URL, model name and tokenizer files."""

from __future__ import annotations

import dataclasses

from evolving_rl.config import parse_config
from evolving_rl.evaluate.policies import PolicySpec
from evolving_rl.evaluate.provenance import outcome_settings, policy_digest


def test_run_local_settings_leave_the_config_digest_alone():
    cfg = parse_config({})
    moved = parse_config({"retrieval": {"port": 9999, "log_dir": "elsewhere",
                                        "torch_threads": 7},
                          "alfworld": {"n_workers": 5, "prepared_dir": "other/prepared"}})
    assert outcome_settings(moved) == outcome_settings(cfg)
    changed = dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, max_steps=3))
    assert outcome_settings(changed) != outcome_settings(cfg)


def test_a_served_policy_is_digested_by_url_model_and_tokenizer(tmp_path):
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text("{}")
    spec = PolicySpec("openai", url="http://h:1", tokenizer=str(tokenizer), model="m")
    first = policy_digest(spec)
    assert policy_digest(dataclasses.replace(spec, model="n")) != first
    assert policy_digest(dataclasses.replace(spec, url="http://h:2")) != first
    (tokenizer / "tokenizer.json").write_text('{"v": 2}')
    assert policy_digest(spec) != first
