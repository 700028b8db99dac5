"""The Mind2Web snapshot builder as it was before the fused tokenizer: the reference.

Owns `build_snapshot` as `env.mind2web.snapshot` had it at commit e32811f (one token per tag, a
tree pass for the subtree words, pure Python), over that module's unchanged parts (`_Node`,
attribute parsing, `Snapshot`). The builder must give exactly its output: the equivalence test
(`tests/mind2web/test_snapshot.py`) compares the two on generated and malformed pages, and
`benchmarks.mind2web_env` serves cold pages with it as the old path:

    python -m benchmarks.snapshot_before --config-json ...   (the Mind2Web server, this builder)

runs `env.mind2web.server` with its snapshots built by this `build_snapshot` (in the request
thread: `mind2web.snapshot_processes: 0`, as before the process pool).
"""

from __future__ import annotations

import re

from env.mind2web.snapshot import (
    ATTR_WORDS,
    INPUT_ROLES,
    INTERACTIVE,
    NAME_ATTRS,
    NAME_WORDS,
    PLAIN_TYPES,
    SHOWN_ATTRS,
    SKIPPED_TAGS,
    TAG_ROLES,
    VOID_TAGS,
    Snapshot,
    _chain_attrs,
    _Entry,
    _Node,
    _tag_attrs,
    _unescape,
    _words,
)

_TOKEN = re.compile(r"<text\b[^>]*>([^<]*)</text>|<(/?)([A-Za-z][\w:.-]*)"
                    r"(?:\s+backend_node_id=\"([^\">]+)\")?([^>]*)>"
                    r"|<!--.*?-->|<![^>]*>|([^<]+)", re.S)
_SPACE = re.compile(r"\s+")


def clean(text: str) -> str:
    """Whitespace collapsed and stripped."""
    return _SPACE.sub(" ", text).strip()


def parse(page: str) -> _Node:
    """The element tree of `page` under a synthetic `#document` root."""
    root = _Node("#document", {})
    stack = [root]
    for text_node, closing, tag, node_id, raw_attrs, data in _TOKEN.findall(page):
        if not tag:  # text, or a comment / doctype (neither)
            text = text_node or data
            if text and not text.isspace():
                stack[-1].text.append(_unescape(text))
            continue
        tag = tag.lower()
        if closing:
            if stack[-1].tag == tag and len(stack) > 1:  # the well-nested common case
                stack.pop()
                continue
            for depth in range(len(stack) - 1, 0, -1):
                if stack[depth].tag == tag:
                    del stack[depth:]
                    break
            continue
        self_closed = raw_attrs.endswith("/")
        if tag == "text":  # an open text node: its content is its parent's text
            if not self_closed:
                stack.append(_Node("text", {}))
                stack[-1].text = stack[-2].text
            continue
        node = _Node(tag, _tag_attrs(node_id, raw_attrs))
        stack[-1].children.append(node)
        if not self_closed and tag not in VOID_TAGS:
            stack.append(node)
    return root


def role_of(node: _Node) -> str:
    """The interactive role of one element, or '' when it has none."""
    role = node.attrs.get("role", "").lower()
    if role in INTERACTIVE:
        return role
    if node.tag == "input":
        kind = node.attrs.get("type", "text").lower()
        return "" if kind == "hidden" else INPUT_ROLES.get(kind, "textbox")
    return TAG_ROLES.get(node.tag, "")


def _subtree_words(root: _Node) -> None:
    """Set every element's `words`: the first NAME_WORDS + 1 words of its subtree text."""
    order, pending = [], [root]
    while pending:
        node = pending.pop()
        order.append(node)
        pending.extend(node.children)
    limit = NAME_WORDS + 1
    for node in reversed(order):  # children before parents
        words = " ".join(node.text).split() if node.text else []
        for child in node.children:
            if len(words) >= limit:
                break
            words.extend(child.words)
        node.words = words[:limit]


def _shown(attrs: dict[str, str], name: str) -> tuple[str, ...]:
    shown = tuple(f'{k}="{_words(attrs[k], ATTR_WORDS)}"' for k in SHOWN_ATTRS
                  if attrs.get(k) and clean(attrs[k]) != name
                  and not (k == "type" and (attrs[k] in PLAIN_TYPES or attrs[k] in INPUT_ROLES)))
    return shown + tuple(f"[{flag}]" for flag, key in (("checked", "input_checked"),
                                                       ("selected", "option_selected"))
                         if attrs.get(key, "").lower() == "true")


def _entry(chain: list[_Node]) -> tuple[str, _Entry] | None:
    """The line (without its ref) and entry of one chain, or None when it is not listed."""
    roles = tuple(r for r in map(role_of, chain) if r)
    attrs = _chain_attrs(chain)
    plain = len(attrs) == 1 and "backend_node_id" in attrs  # the common case: no attributes
    full = "" if plain else clean(next((attrs[k] for k in NAME_ATTRS if attrs.get(k)), ""))
    if not full:
        words = chain[0].words
        full = " ".join(words[:NAME_WORDS]) + (" ..." if len(words) > NAME_WORDS else "")
    if not full and not plain:
        full = clean(attrs.get("value", ""))
    if not roles and not full and chain[-1].children:
        return None
    shown = () if plain else _shown(attrs, full)
    name = full if plain else _words(full, NAME_WORDS)
    line = f'{roles[0] if roles else chain[0].tag} "{name}"'
    if shown:
        line += " " + " ".join(shown)
    tags = tuple(n.tag for n in chain) if len(chain) > 1 else (chain[0].tag,)
    ids = tuple(n.attrs["backend_node_id"] for n in chain if "backend_node_id" in n.attrs)
    return line, (ids, roles + tags, name, shown)


def _plain_entry(node: _Node) -> tuple[str, _Entry] | None:
    """`_entry` of a one-element chain, with a fast path for an element whose only attribute
    is its backend id (most of a page)."""
    attrs = node.attrs
    if len(attrs) != 1 or node.tag == "input" or "backend_node_id" not in attrs:
        return _entry([node])
    role = TAG_ROLES.get(node.tag, "")
    words = node.words
    name = " ".join(words[:NAME_WORDS]) + (" ..." if len(words) > NAME_WORDS else "")
    if not role and not name and node.children:
        return None
    kinds = (role, node.tag) if role else (node.tag,)
    return f'{role or node.tag} "{name}"', ((attrs["backend_node_id"],), kinds, name, ())


def build_snapshot(page: str) -> Snapshot:
    """The listing of `page` (a cleaned_html string) and its elements, refs e1, e2, ..."""
    root = parse(page)
    _subtree_words(root)
    lines: list[str] = []
    entries: list[_Entry] = []
    pending = list(reversed(root.children))
    while pending:
        node = pending.pop()
        if node.tag in SKIPPED_TAGS:
            continue
        chain = [node]
        while len(chain[-1].children) == 1 and not chain[-1].text:
            chain.append(chain[-1].children[0])
        listed = _plain_entry(node) if len(chain) == 1 else _entry(chain)
        if listed is not None:
            lines.append(f"[e{len(entries) + 1}] {listed[0]}")
            entries.append(listed[1])
        pending.extend(reversed(chain[-1].children))
    return Snapshot("\n".join(lines) or "(no elements)", tuple(entries))


if __name__ == "__main__":
    from env.mind2web import server, snapshot_pool

    snapshot_pool.build_snapshot = build_snapshot  # what SnapshotBuilder builds with
    server.main()
