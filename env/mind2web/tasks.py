"""Synthetic Mind2Web tasks in the exact official JSON shape, one task at a time.

Owns page building and task assembly for the generator. A task fills some of a site's form
fields (TYPE / SELECT), submits (a CLICK on the button, on its inner svg — the official "nearest
clickable" rule making the svg the positive and the button a negative — or an ENTER in the last
textbox), then opens a result (a clickable span: a link only in raw_html; sometimes a HOVER).
Each step snapshots its page: a header and footer of links, distractor buttons, text and images
(the size knob), the form with the values entered so far, the results once submitted. Some pages
nest their content deeper than 20 levels; a few steps have no positive candidate; negatives are
~65% of the page's other elements, `html` and `body` always among them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from random import Random

from env.mind2web.dom import Node, assign_ids, candidate, cleaned_html, raw_page
from env.mind2web.sites import Site

NEGATIVE_SHARE = 0.65
NO_POSITIVE_SHARE = 0.05
DEEP_PAGE_SHARE = 0.15
_DISTRACTOR_WORDS = ("Sign in", "Help", "Deals", "Gift cards", "Careers", "Privacy", "Terms",
                     "Contact us", "Accessibility", "Newsletter", "Offers", "About", "Blog",
                     "Account", "Menu", "Close", "Share", "Language", "Store locator", "FAQ")


@dataclass(frozen=True)
class Step:
    """One gold step: the target (a key of the page's refs), op, original op, value, repr."""

    target: str
    op: str
    original_op: str
    value: str
    repr: str


def _uid(rng: Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _distractor(kind: int, word: str, i: int) -> Node:
    if kind == 0:
        return Node("a", {"href": f"/{word.lower().replace(' ', '-')}", "class": "nav"}, word)
    if kind == 1:
        return Node("button", {"type": "button", "class": "btn-secondary"}, word)
    if kind == 2:
        return Node("img", {"src": f"/img/{i}.png", "alt": word})
    if kind == 3:
        return Node("span", {"class": "promo", "role": "link", "onclick": "go()"}, word)
    return Node("div", {"class": "copy"}, f"{word} - learn more about our {word.lower()}")


def _field_node(field, value: str | None) -> Node:
    if field.kind == "TYPE":
        attrs = {"type": "text", "placeholder": field.label, "aria-label": field.label}
        return Node("input", attrs | ({"value": value} if value else {}))
    options = [Node("option", {"value": v} | ({"selected": "true"} if v == value else {}), v)
               for v in field.values]
    return Node("select", {"aria-label": field.label, "name": field.label.lower()},
                children=options)


class PageBuilder:
    """The pages of one task; distractors are fixed per task so its pages look alike."""

    def __init__(self, site: Site, rng: Random, distractors: int):
        self.site = site
        self.rng = rng
        self.deep = rng.random() < DEEP_PAGE_SHARE
        self.noise = [(rng.randrange(5), rng.choice(_DISTRACTOR_WORDS)) for _ in range(distractors)]

    def build(self, filled: dict[str, str], results: bool) -> tuple[Node, dict[str, Node]]:
        refs: dict[str, Node] = {}
        form = Node("form", {"role": "search", "class": "search-form"})
        for field in self.site.fields:
            node = _field_node(field, filled.get(field.label))
            refs[f"field:{field.label}"] = node
            form.children.append(Node("div", {"class": "field"}, children=[
                Node("label", {"for": field.label.lower()}, field.label), node]))
        svg = Node("svg", {"class": "icon"}, children=[Node("path", {"d": "M0 0L9 9"})])
        button = Node("button", {"type": "submit", "class": "btn-primary"}, children=[
            svg, Node("span", {}, self.site.submit)])
        refs["submit"], refs["svg"] = button, svg
        form.children.append(button)
        main = Node("main", {"id": "content"}, children=[form])
        if results:
            main.children.append(self._results(refs))
        half = len(self.noise) // 2
        header = Node("header", {"class": "top"}, children=[
            _distractor(k, w, i) for i, (k, w) in enumerate(self.noise[:half])])
        footer = Node("footer", {"class": "bottom"}, children=[
            _distractor(k, w, i) for i, (k, w) in enumerate(self.noise[half:], half)])
        body = Node("body", {"class": "page"}, children=[header, self._wrap(main), footer])
        root = Node("html", {"lang": "en"}, children=[body])
        assign_ids(root, self.rng.randint(50, 5000))
        return root, refs

    def _results(self, refs: dict[str, Node]) -> Node:
        rows = []
        for name in self.site.results:
            span = Node("span", {"class": "result-title", "role": "link", "onclick": "open()"},
                        name)
            refs[f"result:{name}"] = span
            rows.append(Node("tr", {}, children=[Node("td", {"class": "cell"}, children=[span]),
                                                 Node("td", {"class": "cell"}, "Details")]))
        return Node("table", {"class": "results"}, children=[Node("tbody", {}, children=rows)])

    def _wrap(self, main: Node) -> Node:
        if not self.deep:
            return main
        for depth in range(self.rng.randint(22, 26)):
            main = Node("div", {"class": f"layer-{depth}"}, children=[main])
        return main


def plan_steps(site: Site, rng: Random) -> tuple[str, list[Step], dict[str, str]]:
    """The task sentence, its gold steps and the values typed or selected."""
    fields = rng.sample(site.fields, rng.randint(1, len(site.fields)))
    values = {f.label: rng.choice(f.values) for f in fields}
    steps = [Step(f"field:{f.label}", f.kind, f.kind, values[f.label],
                  f"[{'textbox' if f.kind == 'TYPE' else 'combobox'}]  {f.label} -> "
                  f"{f.kind}: {values[f.label]}") for f in fields]
    submit = rng.random()
    if fields[-1].kind == "TYPE" and submit < 0.3:
        steps.append(Step(f"field:{fields[-1].label}", "CLICK", "ENTER", "",
                          f"[textbox]  {fields[-1].label} -> ENTER"))
    elif submit < 0.55:
        steps.append(Step("svg", "CLICK", "CLICK", "", "[svg]   -> CLICK"))
    else:
        steps.append(Step("submit", "CLICK", "CLICK", "", f"[button]  {site.submit} -> CLICK"))
    result = rng.choice(site.results)
    original = "HOVER" if rng.random() < 0.15 else "CLICK"
    steps.append(Step(f"result:{result}", "CLICK", original, "",
                      f"[span]  {result} -> {original}"))
    wants = ", ".join(f"{label.lower()} {value}" for label, value in values.items())
    return f"{site.verb} {wants}, then open {result}.", steps, values


def _candidates(root: Node, target: Node, step: Step, rng: Random) -> tuple[list, list]:
    positives = [] if rng.random() < NO_POSITIVE_SHARE else [target]
    others = [n for n in root.walk() if n is not target]
    negatives = [n for n in others if n.tag in ("html", "body") or rng.random() < NEGATIVE_SHARE]
    pos = [candidate(n, rng, original=True, top_level=step.target != "svg") for n in positives]
    neg = [candidate(n, rng, original=False, top_level=False) for n in negatives]
    return pos, neg


def make_task(site: Site, rng: Random, distractors: int) -> dict:
    """One task dict in the official schema."""
    sentence, steps, values = plan_steps(site, rng)
    pages = PageBuilder(site, rng, distractors)
    filled: dict[str, str] = {}
    actions = []
    for step in steps:
        root, refs = pages.build(filled, results=step.target.startswith("result:"))
        target, uid = refs[step.target], _uid(rng)
        pos, neg = _candidates(root, target, step, rng)
        actions.append({"action_uid": uid, "raw_html": raw_page(root, site.website, target, uid),
                        "cleaned_html": cleaned_html(root),
                        "operation": {"op": step.op, "original_op": step.original_op,
                                      "value": step.value},
                        "pos_candidates": pos, "neg_candidates": neg})
        if step.op != "CLICK":
            filled[step.target.split(":", 1)[1]] = values[step.target.split(":", 1)[1]]
    return {"annotation_id": _uid(rng), "website": site.website, "domain": site.domain,
            "subdomain": site.subdomain, "confirmed_task": sentence,
            "action_reprs": [s.repr for s in steps], "actions": actions}
