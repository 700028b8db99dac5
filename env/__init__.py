"""Server processes (run from the repository root): the ALFWorld router + workers (`alfworld`), the
Mind2Web env server (`mind2web`) and the retrieval server (`retrieval`), all served by
`http_server` and started by `launch`; the environment servers share one JSON wire (`wire`).

Servers depend on `evolving_rl.config` for their settings and never import the trainer.
"""
