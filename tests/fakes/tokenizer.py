"""A tiny deterministic chat tokenizer for tests and the benchmark: one id per UTF-8 byte.

Ids 0-255 are bytes; 256 opens a message (`<|im_start|>`), 257 closes one (`<|im_end|>`, also
end-of-sequence). The template is ChatML-like, so the follow-up turn logic matches what the HF
implementation computes from a real ChatML template.
"""

from __future__ import annotations

from collections.abc import Sequence

IM_START, IM_END = 256, 257


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8"))


class ByteChatTokenizer:
    """`ChatTokenizer` with a ChatML template over byte ids."""

    eos_token_id = IM_END

    def encode(self, text: str) -> list[int]:
        return _bytes(text)

    def encode_text(self, text: str) -> list[int]:
        return _bytes(text)

    def _message(self, role: str, content: str) -> list[int]:
        return [IM_START, *_bytes(f"{role}\n{content}"), IM_END, *_bytes("\n")]

    def encode_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        ids: list[int] = []
        for message in messages:
            ids += self._message(message["role"], message["content"])
        return ids + [IM_START, *_bytes("assistant\n")]

    def encode_followup(self, user_text: str, last_token_id: int | None) -> list[int]:
        close = _bytes("\n") if last_token_id == IM_END else [IM_END, *_bytes("\n")]
        return close + self._message("user", user_text) + [IM_START, *_bytes("assistant\n")]

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of the byte ids; special tokens are dropped (as the HF implementation does)."""
        return bytes(t for t in token_ids if t < IM_START).decode("utf-8", errors="replace")
