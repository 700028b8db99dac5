"""Fixtures of the slime contract tests (defined in `slime_fixtures`)."""

from slime_fixtures import (  # noqa: F401
    config_path,
    fake_pipeline,
    slime_args,
    slime_types,
)
