"""The tiny character-level model: `local.model: tiny-char`, trained from random weights.

Owns `write_tiny_char` (the folder `resolve_model_path` makes on first use): a tokenizer of one
token per printable ASCII character, newline and tab (anything else is `<unk>`), `<|im_start|>`
and `<|im_end|>` (eos and pad) with a chat template, and the `config.json` of a 2-layer Llama of
width 64 over that vocabulary, its output layer untied. The folder holds no weights: the job
builds the model from the config with `local.random_init` (weights drawn under `run.seed`).
What it is for: the probe environment's learning canary (`tests/local/test_probe_canary.py`),
where a model with a vocabulary of about a hundred tokens can find the answer characters by
sampling, which a randomly initialised model over SmolLM2's 49,152 tokens almost never would.

Two choices make a random model learn to follow a statement in tens of GRPO steps rather than
hundreds (measured on the stated probe, 2026-12-05: docs/design.md §7.5). The chat template has
no assistant opener, so the first reply token is predicted at the user turn's last character
(the answer a stated probe ends with: the model needs no attention to read it, only a map from
the current token to the output). The output layer is untied from the embeddings: tied, that map
exists at random init and greedy decoding copies the last character before any training, which
leaves no rise from chance to measure. With ChatML's opener (13 tokens between the statement and
the reply) the same model and GRPO stayed on one preferred answer for 150 steps.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TINY_CHAR = "tiny-char"
SPECIALS = ("<|im_end|>", "<|im_start|>", "<unk>")
CHARS = ("\n", "\t", *(chr(code) for code in range(32, 127)))
# A system or user turn opens with its role and runs up to the next turn; an assistant turn has no
# opener and ends with <|im_end|>: a reply starts right after the last character of the user's
# turn (see the module docstring).
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'assistant' %}"
    "{{ message['content'] + '<|im_end|>' }}{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] }}{% endif %}"
    "{% endfor %}")
ARCHITECTURE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 4,
                "max_position_embeddings": 4096, "rope_theta": 10000.0,
                "tie_word_embeddings": False}


def _tokenizer():  # -> transformers.PreTrainedTokenizerFast
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate((*SPECIALS, *CHARS))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>",
                                        pad_token="<|im_end|>", unk_token="<unk>",
                                        additional_special_tokens=["<|im_start|>"])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def write_tiny_char(target: Path) -> None:
    """The tokenizer and config.json of `tiny-char` at `target` (written to a sibling, then
    renamed: an interrupted write never looks done)."""
    from transformers import LlamaConfig

    tokenizer = _tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
                         **ARCHITECTURE)
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    tokenizer.save_pretrained(staging)
    (staging / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n",
                                         encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
