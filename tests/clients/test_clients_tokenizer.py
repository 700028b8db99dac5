"""`HFChatTokenizer` on a ChatML template: a packed multi-turn sample equals the template of the
whole conversation, whether or not the model ended its turn with end-of-sequence."""

from __future__ import annotations

from evolving_rl.clients.tokenizer import HFChatTokenizer

EOS = "<|im_end|>"


class StubHF:
    """The slice of a Hugging Face tokenizer `HFChatTokenizer` uses; ChatML with a default
    system prompt (as Qwen2.5's template has), characters as ids, EOS as one special id."""

    eos_token = EOS
    eos_token_id = 0

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        assert not tokenize
        if messages[0]["role"] != "system":
            messages = [{"role": "system", "content": "default"}, *messages]
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}{EOS}\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def encode(self, text, add_special_tokens=False):
        out, i = [], 0
        while i < len(text):
            if text.startswith(EOS, i):
                out.append(0)
                i += len(EOS)
            else:
                out.append(ord(text[i]))
                i += 1
        return out

    def decode(self, ids, skip_special_tokens=True):
        return "".join("" if t == 0 else chr(t) for t in ids)


def test_followup_turns_rebuild_the_chat_template_exactly():
    stub = StubHF()
    tok = HFChatTokenizer(stub)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    reply_a = stub.encode("<action>a</action>")  # stopped by a stop string
    reply_b = stub.encode("<action>b</action>") + [0]  # ended with end-of-sequence
    ids = tok.encode_prompt(messages) + reply_a
    ids += tok.encode_followup("obs 1", reply_a[-1]) + reply_b
    ids += tok.encode_followup("obs 2", reply_b[-1])
    conversation = [*messages, {"role": "assistant", "content": "<action>a</action>"},
                    {"role": "user", "content": "obs 1"},
                    {"role": "assistant", "content": "<action>b</action>"},
                    {"role": "user", "content": "obs 2"}]
    expected = stub.encode(stub.apply_chat_template(conversation, add_generation_prompt=True))
    assert ids == expected
    assert tok.decode(reply_b) == "<action>b</action>"
