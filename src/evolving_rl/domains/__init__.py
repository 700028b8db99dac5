"""Environment adapters: the only environment-specific trainer code.

Modules:
  base      the `EnvironmentAdapter` protocol and the records it exchanges with the pipeline
  alfworld  ALFWorld prompts, observation blocks, action parsing, one sample per episode
"""
