"""Page snapshots: a Mind2Web `cleaned_html` DOM as a compact, numbered element listing.

Owns the parser and the rendering the solver sees. The parser is a one-pass tokenizer over the
XML DOM snapshot with an explicit stack (any depth); a self-closed tag (`<svg ... />`) and a void
tag (`<input>`) open no element, so they never swallow their siblings' text; an unmatched end
tag is ignored. `<text>` nodes hold text: their content is their parent's own text. Pure Python,
built for speed (a cold page is built while a client waits): one token for a whole leaf element
(most of a page), each element's first words computed when it closes, and a listing pass with a
fast path for an element whose only attribute is its backend id. `benchmarks.snapshot_before` is
the simpler builder this one must match exactly.

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
# need no attribute parse. The first alternative takes a whole leaf (`<a ...><text ...>Go</text>
# </a>`, most of a page) as one token: exactly the three tokens of the other alternatives (its tag
# name is never cut short, so it closes only itself); possessive and atomic, so that an element
# that is no leaf is refused at once.
_LEAF = (r"<([A-Za-z][\w:.-]*+)(?>(?:\s+backend_node_id=\"([^\">]+)\")?)([^>]*+)>"
         r"<text\b[^>]*+>([^<]*+)</text></\1>")
_TOKEN = re.compile(_LEAF + r"|<text\b[^>]*>([^<]*)</text>|<(/?)([A-Za-z][\w:.-]*)"
                    r"(?:\s+backend_node_id=\"([^\">]+)\")?([^>]*)>"
                    r"|<!--.*?-->|<![^>]*>|([^<]+)", re.S)
_ATTR_DQ = re.compile(r'([^\s=/>]+)="([^"]*)"')  # the cleaned DOM's own spelling: fast path
_ATTR = re.compile(r"""([^\s=/>]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+)))?""")
_LIMIT = NAME_WORDS + 1  # the words of a subtree kept (enough to know a name is cut)
_SHOWN_KEYS = frozenset(SHOWN_ATTRS) | {"input_checked", "option_selected"}
_NO_LEAF = VOID_TAGS | {"text"}  # tags whose leaf token is read as its three tokens


def clean(text: str) -> str:
    """Whitespace collapsed and stripped."""
    return " ".join(text.split())


def _words(text: str, n: int) -> str:
    parts = text.split()
    return " ".join(parts[:n]) + (" ..." if len(parts) > n else "")


class _Node:
    """A parsed element: tag, attributes, child elements, own text, first words of its subtree
    (`words`, set when the element closes)."""

    __slots__ = ("tag", "attrs", "children", "text", "words")

    def __init__(self, tag: str, attrs: dict[str, str], text: list[str] | None = None,
                 words: list[str] | None = None) -> None:
        self.tag, self.attrs = tag, attrs
        self.children: list[_Node] = []
        self.text: list[str] = [] if text is None else text
        self.words: list[str] = [] if words is None else words


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


def _close(node: _Node) -> None:
    """Set `words`: the first _LIMIT words of the element's own text, then of its children's."""
    words = " ".join(node.text).split() if node.text else []
    for child in node.children:
        if len(words) >= _LIMIT:
            break
        words += child.words
    node.words = words[:_LIMIT]


class _Parser:
    """The tokenizer's tree: an explicit stack of open elements under `#document`."""

    def __init__(self) -> None:
        self.root = _Node("#document", {})
        self.stack = [self.root]

    def open(self, tag: str, node_id: str, raw: str) -> None:
        stack = self.stack
        if tag == "text":  # an open text node: its content is its parent's text
            if not raw.endswith("/"):
                stack.append(_Node("text", {}))
                stack[-1].text = stack[-2].text
            return
        node = _Node(tag, _tag_attrs(node_id, raw))
        stack[-1].children.append(node)
        if not raw.endswith("/") and tag not in VOID_TAGS:
            stack.append(node)

    def close(self, tag: str) -> None:
        stack = self.stack
        for depth in range(len(stack) - 1, 0, -1):
            if stack[depth].tag == tag:
                self.pop(depth)
                return

    def pop(self, depth: int) -> None:
        """Close the elements open at `depth` and above, innermost first."""
        for node in reversed(self.stack[depth:]):
            _close(node)
        del self.stack[depth:]

    def text(self, text: str) -> None:
        if text and not text.isspace():
            self.stack[-1].text.append(_unescape(text))


def parse(page: str) -> _Node:
    """The element tree of `page` under a synthetic `#document` root, every element's `words`
    set."""
    parser = _Parser()
    stack = parser.stack
    for (leaf, leaf_id, leaf_raw, leaf_text, text_node, closing, tag, node_id, raw_attrs,
         data) in _TOKEN.findall(page):
        if leaf:
            tag = leaf.lower()
            if tag in _NO_LEAF or leaf_raw.endswith("/"):  # as its three tokens
                parser.open(tag, leaf_id, leaf_raw)
                parser.text(leaf_text)
                parser.close(tag)
                continue
            attrs = {"backend_node_id": leaf_id} if not leaf_raw and leaf_id \
                and "&" not in leaf_id else _tag_attrs(leaf_id, leaf_raw)
            if leaf_text and not leaf_text.isspace():
                text = _unescape(leaf_text)
                stack[-1].children.append(_Node(tag, attrs, [text], text.split()[:_LIMIT]))
            else:
                stack[-1].children.append(_Node(tag, attrs))
        elif not tag:  # text, or a comment / doctype (neither)
            parser.text(text_node or data)
        elif closing:
            tag = tag.lower()
            if stack[-1].tag == tag and len(stack) > 1:  # the well-nested common case
                _close(stack.pop())
            else:  # an unmatched end tag is ignored
                parser.close(tag)
        else:
            parser.open(tag.lower(), node_id, raw_attrs)
    parser.pop(1)
    return parser.root


def role_of(node: _Node) -> str:
    """The interactive role of one element, or '' when it has none."""
    attrs = node.attrs
    if "role" in attrs and attrs["role"].lower() in INTERACTIVE:
        return attrs["role"].lower()
    if node.tag == "input":
        kind = attrs.get("type", "text").lower()
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


def _chain_attrs(chain: list[_Node]) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for node in chain:
        for key, value in node.attrs.items():
            attrs.setdefault(key, value)
    return attrs


def _shown(attrs: dict[str, str], name: str) -> tuple[str, ...]:
    if _SHOWN_KEYS.isdisjoint(attrs):
        return ()
    shown = []
    for key in SHOWN_ATTRS:
        value = attrs.get(key)
        if value and not (key == "type" and (value in PLAIN_TYPES or value in INPUT_ROLES)) \
                and clean(value) != name:
            shown.append(f'{key}="{_words(value, ATTR_WORDS)}"')
    for flag, key in (("checked", "input_checked"), ("selected", "option_selected")):
        if attrs.get(key, "").lower() == "true":
            shown.append(f"[{flag}]")
    return tuple(shown)


def _name(words: list[str]) -> str:
    """The name made of a subtree's first words."""
    return " ".join(words[:NAME_WORDS]) + " ..." if len(words) > NAME_WORDS else " ".join(words)


def _entry(chain: list[_Node], attrs: dict[str, str], roles: tuple[str, ...],
           ids: tuple[str, ...], tags: tuple[str, ...]) -> tuple[str, _Entry] | None:
    """The line (without its ref) and entry of one chain (`attrs`: its attributes, outer ones
    first; `roles` and `ids`: of its elements that have one; `tags`: of all), or None when it
    is not listed."""
    full = ""
    for key in NAME_ATTRS:
        if attrs.get(key):
            full = clean(attrs[key])
            break
    if not full:
        full = _name(chain[0].words) or clean(attrs.get("value", ""))
    if not roles and not full and chain[-1].children:
        return None
    shown = _shown(attrs, full)
    name = _words(full, NAME_WORDS)
    line = f'{roles[0] if roles else tags[0]} "{name}"'
    if shown:
        line += " " + " ".join(shown)
    return line, (ids, roles + tags, name, shown)


def _chain_entry(chain: list[_Node]) -> tuple[str, _Entry] | None:
    """`_entry` of a chain of two or more elements."""
    return _entry(chain, _chain_attrs(chain), tuple(r for r in map(role_of, chain) if r),
                  tuple(n.attrs["backend_node_id"] for n in chain if "backend_node_id" in n.attrs),
                  tuple(n.tag for n in chain))


def build_snapshot(page: str) -> Snapshot:
    """The listing of `page` (a cleaned_html string) and its elements, refs e1, e2, ..."""
    lines: list[str] = []
    entries: list[_Entry] = []
    kinds: dict[str, tuple[str, tuple[str, ...]]] = {}  # tag -> (role, roles + tags), shared
    pending = parse(page).children[::-1]
    while pending:
        node = pending.pop()
        tag, children, attrs = node.tag, node.children, node.attrs
        if tag in SKIPPED_TAGS:
            continue
        if len(children) == 1 and not node.text:
            chain = [node]
            while len(children) == 1 and not chain[-1].text:
                chain.append(children[0])
                children = children[0].children
            listed = _chain_entry(chain)
        elif len(attrs) != 1 or tag == "input" or "backend_node_id" not in attrs:
            role = role_of(node)
            listed = _entry([node], attrs, (role,) if role else (),
                            (attrs["backend_node_id"],) if "backend_node_id" in attrs else (),
                            (tag,))
        else:  # the common case, one element whose only attribute is its backend id: listed here
            listed = None
            role_kind = kinds.get(tag)
            if role_kind is None:
                role = TAG_ROLES.get(tag, "")
                role_kind = kinds[tag] = (role, (role, tag) if role else (tag,))
            role, kind = role_kind
            words = node.words
            name = " ".join(words) if len(words) <= NAME_WORDS else _name(words)
            if role or name or not children:
                lines.append(f'[e{len(entries) + 1}] {role or tag} "{name}"')
                entries.append(((attrs["backend_node_id"],), kind, name, ()))
        if listed is not None:
            lines.append(f"[e{len(entries) + 1}] {listed[0]}")
            entries.append(listed[1])
        if children:
            pending += children[::-1]
    return Snapshot("\n".join(lines) or "(no elements)", tuple(entries))
