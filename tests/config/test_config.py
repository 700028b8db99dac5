"""The typed config schema: shipped profiles load, and bad values fail naming key and file."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
import typing
from pathlib import Path

import pytest

from evolving_rl import core
from evolving_rl.config import Config, ConfigError, load_config, parse_config, schema, to_dict
from evolving_rl.core.audit import AuditConfig
from evolving_rl.core.bounds import BOUNDS
from evolving_rl.core.rewards import RewardSettings
from evolving_rl.core.roles import RoleCoefficients, RoleWeights

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted((ROOT / "configs").glob("*.yaml"))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_profiles_exist() -> None:
    names = {p.name for p in PROFILES}
    assert {"alfworld.yaml", "web.yaml", "local_cpu.yaml"} <= names


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_shipped_profiles_load(path: Path) -> None:
    cfg = load_config(path)
    assert isinstance(cfg, Config)
    assert cfg.pipeline.n_skills >= 2 and cfg.pipeline.top_k >= 1


def test_reference_values() -> None:
    alf = load_config(ROOT / "configs/alfworld.yaml")
    assert (alf.pipeline.n_skills, alf.pipeline.top_k, alf.pipeline.n_repeats) == (8, 4, 1)
    assert alf.rewards.extractor_weight == 0.2
    assert alf.loss.entropy_coef.extractor == -0.03 and alf.loss.kl_coef.solver == 0.01
    assert (alf.loss.clip_eps_low, alf.loss.clip_eps_high) == (0.1, 0.15)
    web = load_config(ROOT / "configs/web.yaml")
    assert web.environment == "mind2web" and web.rewards.extractor_weight == 0.1


def test_defaults_bind_loopback() -> None:
    cfg = parse_config({})
    assert {cfg.alfworld.host, cfg.retrieval.host, cfg.mind2web.host} == {"127.0.0.1"}


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ("pipeline: {n_skills: 1}", "pipeline.n_skills", ">= 2"),
        ("pipeline: {top_k: 0}", "pipeline.top_k", ">= 1"),
        ("pipeline: {n_skills: '4'}", "pipeline.n_skills", "integer"),
        ("pipeline: {n_skills: 4.0}", "pipeline.n_skills", "integer"),
        ("pipeline: {n_skills: true}", "pipeline.n_skills", "integer"),
        ("pipeline: {nskills: 4}", "pipeline.nskills", "unknown key"),
        ("bogus: 1", "bogus", "unknown key"),
        ("environment: webshop", "environment", "one of"),
        ("pipeline: {method: grpo}", "pipeline.method", "one of"),
        ("run: {tensorboard: 1}", "run.tensorboard", "bool"),
        ("sampling: {solver: {top_p: 0}}", "sampling.solver.top_p", "> 0"),
        ("loss: {kl_coef: {solver: -1}}", "loss.kl_coef.solver", ">= 0"),
        ("loss: {kl_coef: {critic: 1}}", "loss.kl_coef.critic", "unknown key"),
        ("pipeline: {max_context_tokens: 512}\nsampling: {solver: {max_new_tokens: 600}}",
         "sampling.solver.max_new_tokens", "smaller than pipeline.max_context_tokens"),
        ("pipeline: {max_context_tokens: 512}\n"
         "sampling: {solver: {max_new_tokens: 32}, eval_solver: {max_new_tokens: 512}}",
         "sampling.eval_solver.max_new_tokens", "smaller than pipeline.max_context_tokens"),
        ("alfworld: {port: 8101, worker_base_port: 8100, n_workers: 2}",
         "alfworld.port", "collides"),
        ("pipeline: 3", "pipeline", "mapping"),
        ("rewards: {format_penalty: null}", "rewards.format_penalty", "number"),
        ("audit: {max_char_run: 1}", "audit.max_char_run", ">= 2"),
        ("audit: {min_line_share: 1.5}", "audit.min_line_share", "<= 1.0"),
        ("audit: {min_chunk_tokens: 3, max_chunk_tokens: 2}", "audit.max_chunk_tokens",
         ">= min_chunk_tokens"),
        ("audit: {ngram_check: 1}", "audit.ngram_check", "bool"),
        ("audit: {max_non_latin_ratio: 0.1}", "audit.max_non_latin_ratio", "unknown key"),
    ],
)
def test_bad_values_name_key_and_file(tmp_path: Path, text: str, key: str, words: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.key == key
    assert words in str(err.value)
    assert str(path) in str(err.value)


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(_write(tmp_path, "pipeline: [unclosed"))
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "absent.yaml")
    assert str(err.value) == f"no config file {tmp_path / 'absent.yaml'}"
    with pytest.raises(ConfigError, match="mapping"):
        load_config(_write(tmp_path, "- 1\n- 2\n"))


def test_overrides() -> None:
    cfg = load_config(ROOT / "configs/alfworld.yaml",
                      overrides=["pipeline.top_k=2", "sampling.solver.temperature=0.5"])
    assert cfg.pipeline.top_k == 2 and cfg.sampling.solver.temperature == 0.5
    with pytest.raises(ConfigError) as err:
        load_config(ROOT / "configs/alfworld.yaml", overrides=["pipeline.top_k=0"])
    assert err.value.key == "pipeline.top_k"
    with pytest.raises(ConfigError):
        parse_config({}, overrides=["pipeline.top_k"])


def test_an_error_names_where_its_value_came_from() -> None:
    path = ROOT / "configs/local_cpu.yaml"
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides=["foo=1"])
    assert str(err.value).startswith("config key 'foo' in --set foo=1: unknown key")
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides=["local=3"])
    assert "in --set local=3:" in str(err.value)
    for override in ("foo.bar=1", "local.foo.bar=1"):  # an unknown section the --set made
        with pytest.raises(ConfigError) as err:
            load_config(path, overrides=[override])
        assert f"in --set {override}: unknown key" in str(err.value)
    with pytest.raises(ConfigError) as err:  # the file's value, though another key was set
        parse_config({"pipeline": {"top_k": 0}}, path, overrides=["pipeline.n_skills=2"])
    assert f"config key 'pipeline.top_k' in {path}:" in str(err.value)


def test_int_accepted_for_float_and_round_trip() -> None:
    cfg = parse_config({"loss": {"lr": 1}})
    assert isinstance(cfg.loss.lr, float)
    assert parse_config(to_dict(cfg)) == cfg


def test_config_is_frozen() -> None:
    cfg = parse_config({})
    with pytest.raises(AttributeError):
        cfg.pipeline.n_skills = 3  # type: ignore[misc]


def test_the_audit_section_is_the_core_audit_config() -> None:
    cfg = parse_config({})
    assert isinstance(cfg.audit, AuditConfig)
    assert cfg.audit.enabled and not cfg.audit.ngram_check
    core = [f.name for f in dataclasses.fields(AuditConfig)]
    assert [f.name for f in dataclasses.fields(cfg.audit)] == [*core, "enabled"]
    assert [getattr(cfg.audit, name) for name in core] == [
        getattr(AuditConfig(), name) for name in core]


def test_audit_settings_reach_the_core_config() -> None:
    cfg = parse_config({"audit": {"max_char_run": 5, "min_line_share": 0.25,
                                  "ngram_check": True, "min_unique_ngram_ratio": 0.5}})
    expected = AuditConfig(max_char_run=5, min_line_share=0.25, ngram_check=True,
                           min_unique_ngram_ratio=0.5)
    assert all(getattr(cfg.audit, f.name) == getattr(expected, f.name)
               for f in dataclasses.fields(AuditConfig))


def test_the_rewards_section_is_the_core_settings_type() -> None:
    """Declared once: the YAML keys are `RewardSettings`' fields, its bounds the loader's."""
    cfg = parse_config({"rewards": {"solver_weight": 0.7, "extractor_weight": 0.5}})
    assert type(cfg.rewards) is RewardSettings and Config.__dataclass_fields__[
        "rewards"].type in ("RewardSettings", RewardSettings)
    assert cfg.rewards.role_weights == RoleWeights(solver=0.7, extractor=0.5)
    with pytest.raises(ConfigError, match="'rewards.extractor_weight'.*must be >= 0.0"):
        parse_config({"rewards": {"extractor_weight": -0.1}})
    with pytest.raises(ConfigError, match="'rewards.solver_weight'.*must be finite"):
        parse_config({"rewards": {"solver_weight": float("inf")}})


def test_method_and_tensorboard_switches() -> None:
    default = parse_config({})
    assert default.pipeline.method == "evolving" and default.run.tensorboard is True
    cfg = load_config(ROOT / "configs/alfworld.yaml",
                      overrides=["pipeline.method=grpo_baseline", "run.tensorboard=false"])
    assert cfg.pipeline.method == "grpo_baseline" and cfg.run.tensorboard is False


def _config_types(cls: type, seen: dict[type, None]) -> dict[type, None]:
    """`cls` and every dataclass its fields hold (tuples of them too), each once, in order."""
    seen.setdefault(cls, None)
    for hint in typing.get_type_hints(cls).values():
        for tp in (hint, *typing.get_args(hint)):
            if dataclasses.is_dataclass(tp) and tp not in seen:
                _config_types(tp, seen)
    return seen


def _core_types() -> list[type]:
    """Every dataclass defined in `evolving_rl.core`."""
    modules = [importlib.import_module(f"evolving_rl.core.{info.name}")
               for info in pkgutil.iter_modules(core.__path__)]
    return [tp for module in modules for tp in vars(module).values()
            if dataclasses.is_dataclass(tp) and tp.__module__ == module.__name__]


def _declared(tp: type) -> frozenset[str]:
    """The fields `tp` declares itself (not those it inherits)."""
    own = tp.__dict__.get("__annotations__", {})
    return frozenset(f.name for f in dataclasses.fields(tp) if f.name in own)


def test_no_two_config_dataclasses_declare_the_same_fields() -> None:
    """Each setting declared once: no config section or core dataclass declares the field set
    of another (a copy of a core type, or one shape under two names); a section that is a core
    type embeds or extends it."""
    sections = list(_config_types(Config, {}))
    assert RewardSettings in sections and RoleCoefficients in sections
    by_fields: dict[frozenset[str], set[str]] = {}
    for tp in dict.fromkeys([*sections, *_core_types()]):
        if _declared(tp):
            by_fields.setdefault(_declared(tp), set()).add(tp.__qualname__)
    assert [sorted(names) for names in by_fields.values() if len(names) > 1] == []


def test_no_setting_is_declared_in_a_section_and_in_core() -> None:
    """A setting with bounds is declared in core or in the schema, never in both."""
    core_types = set(_core_types())
    core_bounded = {f.name for tp in core_types for f in dataclasses.fields(tp)
                    if f.name in _declared(tp) and f.metadata.get(BOUNDS)}
    schema_bounded = {f.name for tp in _config_types(Config, {}) if tp not in core_types
                      for f in dataclasses.fields(tp) if f.name in _declared(tp)
                      and f.metadata.get(BOUNDS)}
    assert core_bounded and core_bounded & schema_bounded == set()


def test_section_docstrings_leave_their_fields_to_comments() -> None:
    """The schema's one convention of field documentation (config/schema.py's docstring): a
    field is documented by a comment above it, not in its section's docstring."""
    for tp in _config_types(Config, {}):
        if tp.__module__ == schema.__name__:
            named = set(re.findall(r"`(\w+)`", inspect.getdoc(tp) or ""))
            assert named & _declared(tp) == set(), tp.__name__


def test_server_sections_share_one_settings_type() -> None:
    """`threads`, `max_body_bytes`, `capacity`, the TTL and the launcher's waits: one name and
    one declaration (bounds included) in every server section, whose defaults may differ."""
    cfg = parse_config({})
    for section, shared_type in ((cfg.alfworld, schema.EpisodeServerSettings),
                                 (cfg.mind2web, schema.EpisodeServerSettings),
                                 (cfg.retrieval, schema.ServerSettings)):
        assert isinstance(section, shared_type)
        shared = {f.name: f for f in dataclasses.fields(shared_type)}
        for f in dataclasses.fields(section):
            if f.name in shared:
                assert f.metadata == shared[f.name].metadata, f.name
    assert (cfg.alfworld.capacity, cfg.mind2web.capacity) == (600, 1024)
    assert (cfg.alfworld.start_timeout_s, cfg.mind2web.start_timeout_s) == (120.0, 300.0)
    assert (cfg.alfworld.threads, cfg.retrieval.threads) == (16, 8)
    with pytest.raises(ConfigError, match="'alfworld.threads': must be >= 1"):
        parse_config({"alfworld": {"threads": 0}})


def test_the_removed_turn_cap_fails_naming_the_one_that_replaced_it(tmp_path) -> None:
    """One solver turn had two caps, `pipeline.max_turn_tokens` and its role's
    `max_new_tokens` (the smaller won); only the sampling one is left (issue 43 §2)."""
    path = _write(tmp_path, "pipeline:\n  max_turn_tokens: 48\n")
    replaced = ("removed: a solver turn's cap is sampling.solver.max_new_tokens (training) and "
                "sampling.eval_solver.max_new_tokens (evaluation)")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"config key 'pipeline.max_turn_tokens' in {path}: {replaced}"
    with pytest.raises(ConfigError, match="'pipeline.max_turn_tokens' in --set"):
        load_config(ROOT / "configs/local_cpu.yaml", overrides=["pipeline.max_turn_tokens=4"])
    assert "max_turn_tokens" not in {f.name for f in dataclasses.fields(schema.PipelineConfig)}


@pytest.mark.parametrize(("old", "new"), [
    ("alfworld.threads_per_server", "alfworld.threads"),
    ("retrieval.threads_per_server", "retrieval.threads"),
    ("alfworld.capacity_per_worker", "alfworld.capacity"),
    ("alfworld.router_port", "alfworld.port"),
])
def test_a_renamed_key_fails_naming_its_new_key(old, new, tmp_path) -> None:
    section, key = old.split(".")
    path = _write(tmp_path, f"{section}:\n  {key}: 4\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"config key '{old}' in {path}: renamed: use '{new}'"
    with pytest.raises(ConfigError, match=f"'{old}' in --set {old}=4: renamed: use '{new}'"):
        load_config(ROOT / "configs/local_cpu.yaml", overrides=[f"{old}=4"])
