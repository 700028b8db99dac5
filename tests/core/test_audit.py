"""Tests for evolving_rl.core.audit: each rule fires on its nasty input and only there."""

import time

import pytest

from evolving_rl.core.audit import AuditConfig, AuditRule, audit_skill, audit_text
from evolving_rl.core.skill import Skill

CLEAN = (
    "Go to the countertop and take the mug. Then go to the microwave, open it, heat the mug "
    "and close it again. Finally put the mug in the cabinet.\n- Check every drawer once.\t(ok)"
)


def rule_of(text, config=None):
    return audit_text(text, config).rule


def test_clean_text_passes():
    result = audit_text(CLEAN)
    assert result.ok
    assert result.rule is None
    assert result.detail == ""


def test_empty_text_passes():
    assert audit_text("").ok


def test_accented_latin_passes():
    assert audit_text("Put the crème brûlée in the café's fridge; Straße, naïve, Ångström.").ok


def test_symbols_and_digits_pass():
    assert audit_text("Step 3: press → then “quote” — 50% of 10° £5 €3 ©").ok


ZERO_WIDTH = "\u200b\u200c\u200d\u200e\u200f\u2060\u2061\u2062\u2063\u2064\ufeff"
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# soft hyphen (Cf), private use, line/paragraph separators, C0/C1 controls
OTHER = "\u00ad\ue000\u2028\u2029\x00\x07\x1b\r\x7f\x85"


@pytest.mark.parametrize("char", list(ZERO_WIDTH + BIDI + OTHER))
def test_suspicious_unicode(char):
    result = audit_text(f"Go to the{char} desk.")
    assert not result.ok
    assert result.rule is AuditRule.SUSPICIOUS_UNICODE
    assert f"U+{ord(char):04X}" in result.detail
    assert "at 9" in result.detail


def test_zero_width_detail_names_the_char():
    assert "ZERO WIDTH SPACE" in audit_text("a\u200bb").detail


def test_unassigned_code_point():
    assert rule_of("take \U000e0fff now") is AuditRule.SUSPICIOUS_UNICODE


def test_newline_and_tab_allowed():
    assert audit_text("line one\n\tline two\n").ok


@pytest.mark.parametrize(
    "text",
    [
        "Go to the 桌子 and take the mug.",
        "Open the микроволновка first.",
        "T\u0430ke the mug",  # Cyrillic small a, looks like Latin a
        "Heat the mug to 100 \u03bcs",  # Greek mu
        "Take the ｍｕｇ",  # full-width Latin
        "امسك الكوب",
    ],
)
def test_non_english(text):
    result = audit_text(text)
    assert result.rule is AuditRule.NON_ENGLISH
    assert "not Latin" in result.detail


def test_cyrillic_lookalike_detail():
    result = audit_text("T\u0430ke the mug")
    assert "CYRILLIC SMALL LETTER A" in result.detail
    assert result.detail.startswith("1/")


def test_non_latin_ratio_threshold():
    text = "abcdefghi\u4e00"  # 1 of 10 letters
    assert rule_of(text) is AuditRule.NON_ENGLISH
    assert audit_text(text, AuditConfig(max_non_latin_ratio=0.1)).ok
    assert rule_of(text, AuditConfig(max_non_latin_ratio=0.09)) is AuditRule.NON_ENGLISH


def test_unicode_rule_checked_before_language():
    assert rule_of("\u4e00\u200b") is AuditRule.SUSPICIOUS_UNICODE


def test_char_run():
    assert rule_of("wait" + "!" * 41) is AuditRule.REPEATED_CHAR_RUN
    assert audit_text("wait" + "!" * 40).ok
    assert audit_text("a" + " " * 100 + "b").ok  # whitespace runs are not degenerate
    result = audit_text("x" + "=" * 50)
    assert result.detail == "'=' x50 at 1"


def test_char_run_threshold_configurable():
    assert rule_of("aaaa", AuditConfig(max_char_run=3)) is AuditRule.REPEATED_CHAR_RUN
    assert audit_text("aaa", AuditConfig(max_char_run=3)).ok


def test_repeated_line():
    text = "\n".join(["Open the fridge now"] * 4)
    result = audit_text(text)
    assert result.rule is AuditRule.REPEATED_SEGMENT
    assert result.detail.startswith("4x 'open the fridge now'")
    assert audit_text("\n".join(["Open the fridge now"] * 3)).ok


def test_repeated_sentence_case_and_space_insensitive():
    text = "Go to the desk.  go to THE desk! Go to the   desk? go to the desk; Then stop."
    assert rule_of(text) is AuditRule.REPEATED_SEGMENT


def test_short_segments_may_repeat():
    assert audit_text("Yes. Yes. Yes. Yes. Yes. Done.").ok


def test_low_ngram_diversity():
    text = " ".join(["take mug heat mug put mug"] * 3 + ["and then go look somewhere else"])
    # 24 words of a loop with a different ending: under the 40-word minimum, so not checked.
    assert audit_text(text).ok
    looped = " ".join(f"take mug {i % 3} heat mug put mug" for i in range(12))
    result = audit_text(looped)
    assert result.rule is AuditRule.LOW_NGRAM_DIVERSITY
    assert "distinct 4-grams" in result.detail


def test_varied_long_text_passes_ngram_rule():
    words = [f"word{i}" for i in range(200)]
    assert audit_text(" ".join(words)).ok


def test_ngram_threshold_configurable():
    looped = " ".join(f"take mug {i % 3} heat mug put mug" for i in range(12))
    assert audit_text(looped, AuditConfig(min_unique_ngram_ratio=0.0)).ok


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_non_latin_ratio": -0.1},
        {"max_non_latin_ratio": 1.5},
        {"min_unique_ngram_ratio": 2.0},
        {"max_char_run": 0},
        {"max_segment_repeats": 0},
        {"ngram_size": 0},
        {"min_segment_chars": -1},
    ],
)
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        AuditConfig(**kwargs)


def test_defaults_match_the_config_layer():
    config = AuditConfig()
    assert (config.max_non_latin_ratio, config.max_char_run) == (0.0, 40)
    assert config.min_unique_ngram_ratio == 0.3


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        AuditConfig().max_char_run = 5


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("the skill is to heat the mug. " * 1700, AuditRule.REPEATED_SEGMENT),
        ("word " * 10_000, AuditRule.LOW_NGRAM_DIVERSITY),
        ("ab" * 25_000, None),
        ("é" * 50_000, AuditRule.REPEATED_CHAR_RUN),
        ("\u4e00" * 50_000, AuditRule.NON_ENGLISH),
        ("a\u200b" * 25_000, AuditRule.SUSPICIOUS_UNICODE),
    ],
)
def test_50kb_inputs_fast(text, rule):
    start = time.perf_counter()
    result = audit_text(text)
    assert time.perf_counter() - start < 1.0
    assert result.rule is rule


def test_50kb_varied_text_fast_and_clean():
    text = " ".join(f"token{i}" for i in range(6000))
    start = time.perf_counter()
    assert audit_text(text).ok
    assert time.perf_counter() - start < 1.0


def test_audit_skill_reads_all_fields():
    clean = Skill("Heat", "When heating.", ("Take the mug.", "Heat it."), ("Do not drop it.",))
    assert audit_skill(clean).ok
    dirty = Skill("Heat", "When heating.", ("Take the mug.",), ("Do not \u200bdrop it.",))
    assert audit_skill(dirty).rule is AuditRule.SUSPICIOUS_UNICODE
    summary = Skill("Heat", "When heating.", ("Take the mug.",), (), "加热")
    assert audit_skill(summary).rule is AuditRule.NON_ENGLISH


def test_rule_values_are_stable_strings():
    assert [str(rule) for rule in AuditRule] == [
        "suspicious_unicode",
        "non_english",
        "repeated_char_run",
        "repeated_segment",
        "low_ngram_diversity",
    ]
