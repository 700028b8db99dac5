"""The environment-agnostic pipeline: episode loop, four-stage rollout, evaluation, samples."""
