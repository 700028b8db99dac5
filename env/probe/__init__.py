"""The probe environment: seeded tasks with a known right answer, data preparation, env server."""
