"""The launch's stack check (evolving_rl.slime_bridge.stack): top-p replay refused without slime's
sglang-router fork, loud warnings for other SGLang / Megatron-LM versions, and the pin's facts as
slime's docker files state them."""

from __future__ import annotations

import logging
import subprocess
import sys
import types

import pytest
import yaml

from evolving_rl.slime_bridge import stack
from evolving_rl.slime_bridge.stack import PIN, FoundStack, router_problem, version_mismatches
from tests import upstream

FORK = "0.3.2+slime"  # any version containing 'slime' passes the image's own assertion


def test_the_pin_is_what_slimes_docker_files_say():
    docker = upstream.slime_dir() / "docker"
    version = (docker / "version.txt").read_text().strip()
    assert PIN.image == f"slimerl/slime:{version}-cu129"  # docker/justfile: <version>-cu129
    dockerfile = (docker / "Dockerfile").read_text().splitlines()
    assert dockerfile[0] == f"ARG SGLANG_IMAGE_TAG=v{PIN.sglang_version}-cu129"
    assert dockerfile[6] == f"ARG MEGATRON_COMMIT={PIN.megatron_commit}"
    assert "sglang_router-0.3.2" in dockerfile[110]
    assert dockerfile[111] == (f"RUN python -c \"import sglang_router; assert "
                               f"'{stack.ROUTER_FORK_MARK}' in sglang_router.__version__\"")
    assert PIN.megatron_commit == upstream.MEGATRON_COMMIT


@pytest.mark.parametrize(("router", "top_p", "refused"), [
    (None, 0.9, True), ("0.3.2", 0.9, True), (FORK, 0.9, False), (None, 1.0, False),
    ("0.3.2", 1.0, False)])
def test_top_p_replay_needs_the_forked_router(router, top_p, refused):
    problem = router_problem(FoundStack(PIN.sglang_version, None, router), top_p)
    assert (problem is not None) == refused
    if refused:
        assert "sglang-top_p.patch" in problem and "sglang-router" in problem
        assert PIN.image in problem


def test_versions_other_than_the_pins_are_named():
    assert version_mismatches(FoundStack(PIN.sglang_version, PIN.megatron_commit, FORK)) == []
    assert version_mismatches(FoundStack(PIN.sglang_version, None, FORK)) == []  # not visible
    assert version_mismatches(FoundStack("0.5.23", "0" * 40, FORK)) == [
        f"sglang 0.5.23, the pin's is {PIN.sglang_version}",
        f"Megatron-LM at 000000000000, the pin's is {PIN.megatron_commit[:12]}"]
    assert "not installed" in version_mismatches(FoundStack(None, None, FORK))[0]


def test_the_check_reads_the_megatron_checkout_and_warns_loudly(tmp_path, monkeypatch, caplog):
    megatron = tmp_path / "Megatron-LM"
    megatron.mkdir()
    git = ["git", "-C", str(megatron), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    monkeypatch.setitem(sys.modules, "sglang_router", types.SimpleNamespace(__version__=FORK))
    monkeypatch.setattr(stack, "_sglang_version", lambda: "0.5.23")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"environment": "alfworld", "sampling": {
        "solver": {"top_p": 0.9}, "extractor": {"top_p": 0.9}}}))
    with caplog.at_level(logging.WARNING):
        assert stack.main(["--config", str(config), "--megatron-dir", str(megatron)]) == 0
    assert f"VERSION MISMATCH: Megatron-LM at {head[:12]}" in caplog.text
    assert "VERSION MISMATCH: sglang 0.5.23" in caplog.text and PIN.image in caplog.text
    monkeypatch.setitem(sys.modules, "sglang_router", types.SimpleNamespace(__version__="0.3.2"))
    assert stack.main(["--config", str(config), "--megatron-dir", str(megatron)]) == 2
    assert "slime's fork of sglang-router" in caplog.text


def test_a_megatron_copy_inside_another_repository_has_no_commit_of_its_own(tmp_path):
    """A copy of Megatron-LM in a folder of another git work tree (this checkout's ignored
    upstream/, as on the GPU run of 2026-12-07) is not at that tree's HEAD: no commit seen,
    no false mismatch; the top of a checkout is read."""
    outer = tmp_path / "repo"
    git = ["git", "-C", str(outer), "-c", "user.name=t", "-c", "user.email=t@t"]
    (outer / "upstream" / "Megatron-LM" / "megatron").mkdir(parents=True)
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    assert stack._git_head(outer / "upstream" / "Megatron-LM") is None
    assert stack._git_head(outer) is not None
