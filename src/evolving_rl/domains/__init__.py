"""Environment adapters: the only environment-specific trainer code.

Modules:
  base          the `EnvironmentAdapter` protocol, the records it exchanges with the pipeline,
                and `Domain`, an environment's registry entry
  registry      `domain_for(cfg)`: the configured environment's entry (what an environment
                provides)
  skill_prompt  the reference extractor prompt: ALFWorld's wording, which other environments edit
  alfworld      ALFWorld prompts, observation blocks, action parsing, one sample per episode; its
                entry (the commands read from the action tag in alfworld_actions)
  mind2web      Mind2Web step prompts, episode views, web actions, one sample per step; its entry
                (the web actions in mind2web_actions, the standard metrics and the step-scoring
                rule its env server shares in mind2web_metrics, the reference web extractor
                prompt in mind2web_skill_prompt)

An environment's modules are named after it and import no other environment's
(tests/test_import_graph.py); what environments share lives in a module named for no environment.
"""
