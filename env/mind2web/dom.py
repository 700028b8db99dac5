"""A tiny DOM for synthetic Mind2Web pages and its two official serialisations.

Owns the element tree (`Node`), backend node id assignment, and the two page strings each
Mind2Web action carries:

- `cleaned_html`: the XML DOM snapshot of the official processing — every element and every
  text node (`<text>`) carries `backend_node_id`; attribute names are rewritten (`aria-label` ->
  `aria_label`, an input's `value` -> `input_value`, `checked` -> `input_checked`); `class`,
  `onclick`, `is_clickable`, `data_*` and `role="link"` are dropped, so a clickable span or cell
  looks like plain text; childless elements are self-closed.
- `raw_html`: page source with the site's own attributes, and the test id attribute
  (`data_pw_testid_buckeye`, equal to the action uid) on the acted element.

Also the official candidate record (`candidate`): tag, backend id, target flags and the element's
attributes as a JSON string.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from random import Random
from xml.sax.saxutils import escape, quoteattr

TESTID_ATTR = "data_pw_testid_buckeye"
VOID_TAGS = frozenset({"input", "img", "meta", "br", "path"})
_RENAMED = {"aria-label": "aria_label", "checked": "input_checked"}
_KEPT = frozenset({"alt", "aria_label", "input_checked", "input_value", "label", "name",
                   "placeholder", "role", "title", "type", "value", "id", "selected"})


@dataclass
class Node:
    """One element; `text` is its own text node (rendered before its children)."""

    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    text: str = ""
    children: list[Node] = field(default_factory=list)
    bid: str = ""
    text_bid: str = ""

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()


def assign_ids(root: Node, start: int) -> None:
    """Backend node ids in document order, text nodes included."""
    next_id = start
    for node in root.walk():
        node.bid = str(next_id)
        next_id += 1
        if node.text:
            node.text_bid = str(next_id)
            next_id += 1


def _cleaned_attrs(node: Node) -> dict[str, str]:
    kept = {}
    for name, value in node.attrs.items():
        if name == "value" and node.tag == "input":
            name = "input_value"
        name = _RENAMED.get(name, name)
        if name in _KEPT and not (name == "role" and value == "link"):
            kept[name] = value
    return kept


def _open(tag: str, attrs: dict[str, str]) -> str:
    return "<" + tag + "".join(f" {k}={quoteattr(v)}" for k, v in attrs.items())


def cleaned_html(node: Node) -> str:
    head = _open(node.tag, {"backend_node_id": node.bid, **_cleaned_attrs(node)})
    if not node.text and not node.children:
        return head + " />"
    text = f'<text backend_node_id="{node.text_bid}">{escape(node.text)}</text>' if node.text \
        else ""
    return head + ">" + text + "".join(cleaned_html(c) for c in node.children) + f"</{node.tag}>"


def raw_html(node: Node, target: Node | None, action_uid: str) -> str:
    attrs = dict(node.attrs)
    if node is target:
        attrs[TESTID_ATTR] = action_uid
    head = _open(node.tag, attrs) + ">"
    if node.tag in VOID_TAGS:
        return head
    inner = escape(node.text) + "".join(raw_html(c, target, action_uid) for c in node.children)
    return head + inner + f"</{node.tag}>"


def raw_page(root: Node, title: str, target: Node | None, action_uid: str) -> str:
    body = raw_html(root, target, action_uid)
    head = f'<head><meta charset="utf-8"><title>{escape(title)}</title></head>'
    return "<!DOCTYPE html>" + body.replace(">", ">" + head, 1)


def candidate(node: Node, rng: Random, *, original: bool, top_level: bool) -> dict:
    """The official candidate record; `attributes` is a JSON string, as in the dataset."""
    box = f"{rng.uniform(0, 1200):.1f},{rng.uniform(0, 3000):.1f}," \
          f"{rng.uniform(8, 400):.1f},{rng.uniform(8, 80):.1f}"
    attributes = {"backend_node_id": node.bid, "bounding_box_rect": box, **node.attrs}
    return {"attributes": json.dumps(attributes), "backend_node_id": node.bid,
            "is_original_target": original, "is_top_level_target": top_level, "tag": node.tag}
