"""Dense task retrieval: prepared task rows, embedding model, embedding cache and exact search.

Modules: `tasks` (prepared split files → unique rows), `encoder` (offline model loading and
encoding), `cache` (on-disk cache keyed by model and text hash), `index` (exact top-k search),
`protocol` (HTTP wire types of the server in `env/retrieval`), `build` (the cache-builder CLI).
"""
