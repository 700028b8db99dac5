"""Page snapshots: a Mind2Web `cleaned_html` DOM as a compact, numbered element listing.

Owns the parser and the rendering the solver sees. The parser is a one-pass tokenizer over the
XML DOM snapshot with an explicit stack (any depth); a self-closed tag (`<svg ... />`) and a void
tag (`<input>`) open no element, so they never swallow their siblings' text; an unmatched end
tag is ignored. `<text>` nodes hold text: their content is their parent's own text.

Listing. Each single-child wrapper chain (`a > span > text`, `html > body > div`) is one line
whose ref stands for every element of the chain. A chain is listed when it has an interactive
role, an accessible name, or no element children (icons). A line reads
`[eN] role "name" attr="..."`: the role is the chain's first interactive role (tag, input type or
`role` attribute) or else the outermost tag; the name is the first of aria_label, alt, title,
placeholder, the subtree's text (12 words), value. Only whitelisted cleaned-DOM attributes are
shown, never raw-page ones, and positive candidates are rendered exactly like every other
element: the rules never look at the task's answer.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import cached_property

NAME_WORDS = 12
ATTR_WORDS = 8
VOID_TAGS = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
                       "param", "source", "track", "wbr"})
SKIPPED_TAGS = frozenset({"head", "script", "style", "noscript", "meta", "title", "link"})
TAG_ROLES = {"a": "link", "button": "button", "option": "option", "select": "combobox",
             "summary": "button", "textarea": "textbox"}
INPUT_ROLES = {"button": "button", "checkbox": "checkbox", "image": "button", "number":
               "spinbutton", "radio": "radio", "range": "slider", "reset": "button",
               "search": "searchbox", "submit": "button"}
INTERACTIVE = frozenset({"button", "checkbox", "combobox", "link", "listbox", "menuitem",
                         "option", "radio", "searchbox", "slider", "spinbutton", "switch", "tab",
                         "textbox"})
NAME_ATTRS = ("aria_label", "alt", "title", "placeholder")
SHOWN_ATTRS = ("type", "placeholder", "value", "input_value")
PLAIN_TYPES = frozenset({"text", "button", "submit"})
# The cleaned DOM writes each element's backend id first; the tokenizer takes it, so most tags
# need no attribute parse.
_TOKEN = re.compile(r"<text\b[^>]*>([^<]*)</text>|<(/?)([A-Za-z][\w:.-]*)"
                    r"(?:\s+backend_node_id=\"([^\">]+)\")?([^>]*)>"
                    r"|<!--.*?-->|<![^>]*>|([^<]+)", re.S)
_ATTR_DQ = re.compile(r'([^\s=/>]+)="([^"]*)"')  # the cleaned DOM's own spelling: fast path
_ATTR = re.compile(r"""([^\s=/>]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+)))?""")
_SPACE = re.compile(r"\s+")


def clean(text: str) -> str:
    """Whitespace collapsed and stripped."""
    return _SPACE.sub(" ", text).strip()


def _words(text: str, n: int) -> str:
    parts = text.split()
    return " ".join(parts[:n]) + (" ..." if len(parts) > n else "")


class _Node:
    """A parsed element: tag, attributes, child elements, own text, first words of its subtree."""

    __slots__ = ("tag", "attrs", "children", "text", "words")

    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag, self.attrs = tag, attrs
        self.children: list[_Node] = []
        self.text: list[str] = []
        self.words: list[str] = []


def _unescape(text: str) -> str:
    return html.unescape(text) if "&" in text else text


def _attrs(raw: str) -> dict[str, str]:
    pairs = _ATTR_DQ.findall(raw)
    if len(pairs) != raw.count("="):  # quoting other than name="value": the general rule
        return {name.lower(): _unescape(dq or sq or bare)
                for name, dq, sq, bare in _ATTR.findall(raw)}
    if "&" in raw or not raw.islower():
        return {name.lower(): _unescape(value) for name, value in pairs}
    return dict(pairs)


def _tag_attrs(node_id: str, raw: str) -> dict[str, str]:
    """The attributes of a tag whose leading backend id (if any) the tokenizer split off."""
    attrs = _attrs(raw) if "=" in raw else {}
    return {"backend_node_id": _unescape(node_id), **attrs} if node_id else attrs


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


@dataclass(frozen=True)
class Element:
    """One listed line: its ref, the backend ids and tags of its chain, role, name, attributes."""

    ref: str
    backend_ids: frozenset[str]
    roles: frozenset[str]  # interactive roles and tags of the chain
    name: str
    shown: tuple[str, ...]

    @cached_property
    def search_text(self) -> str:
        """Roles, tags, name and shown attributes, lower-cased (for fuzzy matching)."""
        return clean(" ".join([*sorted(self.roles), self.name, *self.shown])).lower()


_Entry = tuple[tuple[str, ...], tuple[str, ...], str, tuple[str, ...]]  # ids, roles, name, shown


@dataclass(frozen=True)
class Snapshot:
    """The listing text and, per line, what `Element` is built from (built on demand: a page
    has thousands of lines and a step looks at one)."""

    text: str
    entries: tuple[_Entry, ...]

    def element(self, ref: str) -> Element | None:
        index = int(ref[1:]) - 1 if ref[:1] == "e" and ref[1:].isdigit() else -1
        if not 0 <= index < len(self.entries):
            return None
        ids, roles, name, shown = self.entries[index]
        return Element(ref, frozenset(ids), frozenset(roles), name, shown)

    @property
    def elements(self) -> list[Element]:
        return [self.element(f"e{i + 1}") for i in range(len(self.entries))]


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


def _chain_attrs(chain: list[_Node]) -> dict[str, str]:
    if len(chain) == 1:
        return chain[0].attrs
    attrs: dict[str, str] = {}
    for node in chain:
        for key, value in node.attrs.items():
            attrs.setdefault(key, value)
    return attrs


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
