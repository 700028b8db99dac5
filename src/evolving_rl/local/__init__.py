"""Embedded local backend: in-process HF policy and GRPO trainer (not built yet, see __main__)."""
