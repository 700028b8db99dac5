"""Inspecting a run's skill library: `python -m evolving_rl.skills list|search|show|export`.

Selection and filters (select), full-text and embedding search (search), tables and cards
(render), the command line (__main__). Records are read with `pipeline.skill_library`, never
changed; an export is a new library file in the same format.
"""
