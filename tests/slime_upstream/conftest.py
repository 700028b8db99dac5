"""The upstream tests: slime and Megatron-LM at the pins (tests/upstream.py finds them).

`overlay/` holds the checks that import SGLang; they run in a child pytest
(test_overlay_checks.py) with the overlay of scripts/upstream_overlay.sh, never in this session,
and `stand_ins/` is only for that child: this session collects neither.
"""

collect_ignore = ["overlay", "stand_ins"]
