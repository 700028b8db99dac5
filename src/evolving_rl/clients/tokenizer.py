"""The tokenizer abstraction of the episode loop: chat-templated prompts and follow-up turns.

Owns `ChatTokenizer` (the protocol) and `HFChatTokenizer` (a Hugging Face tokenizer with a chat
template, used in production). Only text the trainer writes is ever encoded (system prompt, task,
observations); generated tokens are kept as sampled and never re-tokenised. A follow-up turn is
the exact token sequence the chat template puts between the end of the model's text and the start
of its next reply ("close the assistant turn, user message, open the next assistant turn"), so a
multi-turn sample has the same tokens the template would give for the whole conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

Message = dict[str, str]

_PROBE_USER = "x"
_PROBE_REPLY = "y"


class ChatTokenizer(Protocol):
    """What the episode loop needs from a tokenizer."""

    def encode_prompt(self, messages: Sequence[Message]) -> list[int]:
        """Chat template of `messages` followed by the assistant generation prompt."""
        ...

    def encode_followup(self, user_text: str, last_token_id: int | None) -> list[int]:
        """Close the model's turn (unless `last_token_id`, the last sampled id, already ended
        it), add a user message with `user_text`, and open the next assistant turn."""
        ...

    def encode_text(self, text: str) -> list[int]:
        """Plain text (no template, no special tokens), e.g. a reply prefix."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of generated ids for parsing (special tokens dropped); never re-encoded."""
        ...


class HFChatTokenizer:
    """`ChatTokenizer` over a Hugging Face tokenizer that has a chat template."""

    def __init__(self, tokenizer: Any, system_prompt: str = "s") -> None:
        self._tok = tokenizer
        self._close_text, self._turn_head, self._turn_tail = self._template_pieces(system_prompt)

    @classmethod
    def from_pretrained(cls, path: str) -> HFChatTokenizer:
        from transformers import AutoTokenizer  # heavy import, only where this class is used

        return cls(AutoTokenizer.from_pretrained(path))

    def _template_pieces(self, system_prompt: str) -> tuple[str, str, str]:
        """Text closing an assistant turn, and the user turn's text before and after its body."""
        base = [{"role": "system", "content": system_prompt},
                {"role": "user", "content": _PROBE_USER},
                {"role": "assistant", "content": _PROBE_REPLY}]
        closed = self._tok.apply_chat_template(base, tokenize=False)
        marker = "\x00OBSERVATION\x00"
        full = self._tok.apply_chat_template(
            [*base, {"role": "user", "content": marker}], tokenize=False,
            add_generation_prompt=True)
        if not full.startswith(closed):
            raise ValueError("chat template is not prefix-stable across turns")
        close = closed[closed.rindex(_PROBE_REPLY) + len(_PROBE_REPLY):]
        head, _, tail = full[len(closed):].partition(marker)
        return close, head, tail

    def encode_text(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def encode_prompt(self, messages: Sequence[Message]) -> list[int]:
        text = self._tok.apply_chat_template(list(messages), tokenize=False,
                                             add_generation_prompt=True)
        return self.encode_text(text)

    def encode_followup(self, user_text: str, last_token_id: int | None) -> list[int]:
        close = self._close_text
        eos = self._tok.eos_token or ""
        ended = last_token_id is not None and last_token_id == self._tok.eos_token_id
        if ended and eos and close.startswith(eos):
            close = close[len(eos):]
        return self.encode_text(close + self._turn_head + user_text + self._turn_tail)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._tok.decode(list(token_ids), skip_special_tokens=True)
