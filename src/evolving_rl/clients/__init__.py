"""Async HTTP clients: the policy (SGLang), environment servers and the retrieval server.

Modules:
  http       sessions, JSON POSTs, the two client errors, idempotence-aware retries
  policy     `PolicyClient` protocol, `SamplingParams`, `Generation`, `SGLangPolicyClient`
  tokenizer  `ChatTokenizer` protocol and the Hugging Face implementation
  env        `EnvClient` (`/reset`, `/step`, `/close`)
  retrieval  `RetrievalClient` (`/search`)
"""
