"""Evolving-RL: a solver and a skill extractor, one policy, trained together with GRPO."""

__version__ = "0.1.0"
