"""Mind2Web action parsing: JSON and `OP eN | value` forms, normalisation, malformed replies."""

import pytest

from evolving_rl.core.actions import ActionStatus
from evolving_rl.domains.mind2web_actions import WebAction, parse_web_action


@pytest.mark.parametrize("text, expected", [
    ('<reasoning>x</reasoning><action>{"op":"CLICK","ref":"e12"}</action>',
     WebAction("CLICK", "e12")),
    ('<action>{"op": "type", "ref": "e7", "value": "new   york"}</action>',
     WebAction("TYPE", "e7", "new york")),
    ('<action>```json\n{"op":"SELECT","ref":"[e9]","value":"2"}\n```</action>',
     WebAction("SELECT", "e9", "2")),
    ('<action>{"op":"HOVER","ref":"ref=e3","value":"ignored"}</action>',
     WebAction("CLICK", "e3")),
    ("<action>CLICK e12</action>", WebAction("CLICK", "e12")),
    ("<action>TYPE e7 | new york", WebAction("TYPE", "e7", "new york")),
    ("<action>enter [E4]</action>", WebAction("CLICK", "e4")),
    ("<action>SELECT e2: Economy</action>", WebAction("SELECT", "e2", "Economy")),
])
def test_web_actions_parse(text, expected):
    parsed = parse_web_action(text)
    assert parsed.ok and parsed.status is ActionStatus.OK and parsed.action == expected
    assert parse_web_action(f"<action>{expected.as_text()}</action>").action == expected


@pytest.mark.parametrize("text, status", [
    ("CLICK e12", ActionStatus.NO_ACTION_TAG),
    ("<action> </action>", ActionStatus.EMPTY_ACTION),
    ("<action>SCROLL e1</action>", ActionStatus.MALFORMED_ACTION),
    ("<action>CLICK button 3</action>", ActionStatus.MALFORMED_ACTION),
    ('<action>{"op":"TYPE","ref":"e7"}</action>', ActionStatus.MALFORMED_ACTION),
    ('<action>{"op":"CLICK","ref":12}</action>', ActionStatus.MALFORMED_ACTION),
    ("<action>[1, 2]</action>", ActionStatus.MALFORMED_ACTION),
    ('<action>{"op":"CLICK",</action>', ActionStatus.MALFORMED_ACTION),
    ("<action>CLICK e\u0661</action>", ActionStatus.MALFORMED_ACTION),  # the server's 400
])
def test_malformed_web_replies_are_statuses(text, status):
    parsed = parse_web_action(text)
    assert not parsed.ok and parsed.action is None and parsed.status is status


def test_wire_form():
    assert WebAction("TYPE", "e7", "ny").to_wire() == {"op": "TYPE", "ref": "e7", "value": "ny"}
