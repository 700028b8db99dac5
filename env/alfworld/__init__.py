"""ALFWorld server side: game generator, data preparation, and the router + worker servers.

Games are played by the real engine (PyPI alfworld==0.4.2 + textworld==1.7.0 PDDL backend).
Generator: `generate` (orchestration, CLI) over `gen_scene` (floor plans), `gen_task` (task rules,
difficulty knob), `gen_pddl` (file format) and `planner` (Fast Downward walkthrough + replay proof).
Data preparation: `prepare` (ALFWORLD_DATA → prompt JSONL splits).
Servers: `router` + `worker` processes, started and stopped by `launch`. What the local main job
calls (ALFWorld's `Domain.services`): `service` (`prepare_data`, `serve`).
"""
