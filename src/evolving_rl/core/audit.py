"""Rule-based language audit of skill text: invisible Unicode, non-English script, repetition.

Owns `AuditConfig` (thresholds; the config layer maps YAML onto it), the rules, and
`audit_text` / `audit_skill`, which return the first rule that fires, checked in this order:

  suspicious_unicode   a control char other than \\n and \\t, or a char of category Cf (format:
                       zero-width U+200B..U+200F, U+2060..U+2064, U+FEFF, bidi controls
                       U+202A..U+202E, U+2066..U+2069, ...), Co (private use), Cs (surrogate),
                       Cn (unassigned), Zl or Zp (line/paragraph separators);
  non_english          the share of alphabetic chars whose Unicode name does not start with
                       "LATIN" exceeds `max_non_latin_ratio` (default 0: any CJK, Cyrillic or
                       Greek letter, or a full-width Latin letter, fails);
  repeated_char_run    one non-space char repeated more than `max_char_run` times in a row;
  repeated_segment     one line or sentence (case- and space-normalised, at least
                       `min_segment_chars` long) occurring more than `max_segment_repeats` times;
  low_ngram_diversity  for texts of at least `min_words_for_ngram_check` words, distinct word
                       n-grams / all word n-grams below `min_unique_ngram_ratio`.
Every rule is linear in the text length.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from evolving_rl.core.skill import Skill
from evolving_rl.core.strenum import StrEnum

_SUSPICIOUS_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
_ALLOWED_CONTROLS = frozenset("\n\t")
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SEGMENT_SPLIT = re.compile(r"[\n.!?;]+")
_WORD = re.compile(r"\w+")


class AuditRule(StrEnum):
    SUSPICIOUS_UNICODE = "suspicious_unicode"
    NON_ENGLISH = "non_english"
    REPEATED_CHAR_RUN = "repeated_char_run"
    REPEATED_SEGMENT = "repeated_segment"
    LOW_NGRAM_DIVERSITY = "low_ngram_diversity"


@dataclass(frozen=True)
class AuditConfig:
    """Audit thresholds (see the module docstring for what each bounds)."""

    max_non_latin_ratio: float = 0.0
    max_char_run: int = 40
    max_segment_repeats: int = 3
    min_segment_chars: int = 12
    ngram_size: int = 4
    min_words_for_ngram_check: int = 40
    min_unique_ngram_ratio: float = 0.3

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_non_latin_ratio <= 1.0:
            raise ValueError(
                f"max_non_latin_ratio must be in [0, 1], got {self.max_non_latin_ratio}"
            )
        if not 0.0 <= self.min_unique_ngram_ratio <= 1.0:
            raise ValueError(
                f"min_unique_ngram_ratio must be in [0, 1], got {self.min_unique_ngram_ratio}"
            )
        for name in ("max_char_run", "max_segment_repeats", "ngram_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.min_segment_chars < 0 or self.min_words_for_ngram_check < 0:
            raise ValueError("min_segment_chars and min_words_for_ngram_check must be >= 0")


@dataclass(frozen=True)
class AuditResult:
    """`rule` is the first rule that fired (None iff `ok`); `detail` says where or how much."""

    ok: bool
    rule: AuditRule | None
    detail: str


_PASS = AuditResult(True, None, "")


def _char_label(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, 'UNNAMED')}"


def _suspicious_unicode(text: str) -> str | None:
    if text.isascii():
        match = _ASCII_CONTROL.search(text)
        return f"{_char_label(match.group())} at {match.start()}" if match else None
    for index, char in enumerate(text):
        if char in _ALLOWED_CONTROLS or (char.isascii() and char.isprintable()):
            continue
        if unicodedata.category(char) in _SUSPICIOUS_CATEGORIES:
            return f"{_char_label(char)} at {index}"
    return None


def _non_english(text: str, max_ratio: float) -> str | None:
    if text.isascii():
        return None
    letters = non_latin = 0
    first: str | None = None
    for char in text:
        if not char.isalpha():
            continue
        letters += 1
        if not char.isascii() and not unicodedata.name(char, "").startswith("LATIN "):
            non_latin += 1
            first = first or char
    if first is None or non_latin / letters <= max_ratio:
        return None
    return f"{non_latin}/{letters} letters not Latin, first {_char_label(first)}"


def _repeated_char_run(text: str, max_run: int) -> str | None:
    match = re.search(rf"(\S)\1{{{max_run},}}", text)
    if match is None:
        return None
    return f"{match.group(1)!r} x{len(match.group())} at {match.start()}"


def _repeated_segment(text: str, min_chars: int, max_repeats: int) -> str | None:
    segments = (" ".join(part.lower().split()) for part in _SEGMENT_SPLIT.split(text))
    counts = Counter(segment for segment in segments if len(segment) >= min_chars)
    if not counts:
        return None
    segment, count = counts.most_common(1)[0]
    return f"{count}x {segment[:80]!r}" if count > max_repeats else None


def _low_ngram_diversity(text: str, config: AuditConfig) -> str | None:
    words = _WORD.findall(text.lower())
    size = config.ngram_size
    if len(words) < max(config.min_words_for_ngram_check, size):
        return None
    grams = [tuple(words[i : i + size]) for i in range(len(words) - size + 1)]
    ratio = len(set(grams)) / len(grams)
    if ratio >= config.min_unique_ngram_ratio:
        return None
    return f"{len(set(grams))}/{len(grams)} distinct {size}-grams ({ratio:.2f})"


def audit_text(text: str, config: AuditConfig | None = None) -> AuditResult:
    """Run the rules in order on `text`; the empty text passes."""
    config = config or AuditConfig()
    checks = (
        (AuditRule.SUSPICIOUS_UNICODE, lambda: _suspicious_unicode(text)),
        (AuditRule.NON_ENGLISH, lambda: _non_english(text, config.max_non_latin_ratio)),
        (AuditRule.REPEATED_CHAR_RUN, lambda: _repeated_char_run(text, config.max_char_run)),
        (
            AuditRule.REPEATED_SEGMENT,
            lambda: _repeated_segment(text, config.min_segment_chars, config.max_segment_repeats),
        ),
        (AuditRule.LOW_NGRAM_DIVERSITY, lambda: _low_ngram_diversity(text, config)),
    )
    for rule, check in checks:
        detail = check()
        if detail is not None:
            return AuditResult(False, rule, detail)
    return _PASS


def audit_skill(skill: Skill, config: AuditConfig | None = None) -> AuditResult:
    """Audit every text field of a skill, joined one per line."""
    return audit_text("\n".join(skill.texts()), config)
