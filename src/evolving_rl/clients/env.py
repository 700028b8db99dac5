"""Async client of an environment server (router + workers): `/reset`, `/step`, `/close`.

Owns the HTTP calls and their retry rules; what the bodies mean belongs to the environment's
adapter in `evolving_rl.domains`. `/reset` and `/step` change server state, so they are retried
only when the connection was refused before the request was sent; `/close` is idempotent.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from evolving_rl.clients.http import Retry, RetryPolicy, get_json, new_session, post_json
from evolving_rl.config.schema import ClientConfig


class EnvClient:
    """One connection pool to one environment router."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, cfg: ClientConfig) -> None:
        self._session = session
        self._base_url = base_url.rstrip("/")
        self._timeout_s = cfg.env_timeout_s
        self._retry = RetryPolicy(cfg.max_retries, cfg.retry_backoff_s)

    @classmethod
    def open(cls, base_url: str, cfg: ClientConfig) -> EnvClient:
        """A client with its own connection pool; call inside the event loop, `close` after."""
        return cls(new_session(cfg.pool_size, cfg.env_timeout_s), base_url, cfg)

    async def close(self) -> None:
        await self._session.close()

    async def _post(self, path: str, body: dict[str, Any], retry: Retry) -> dict[str, Any]:
        return await post_json(self._session, self._base_url + path, body, retry=retry,
                               policy=self._retry, timeout_s=self._timeout_s)

    async def health(self) -> dict[str, Any]:
        return await get_json(self._session, self._base_url + "/health")

    async def reset(self, body: dict[str, Any]) -> dict[str, Any]:
        """Start an episode; the answer carries its `episode_id` and first observation."""
        return await self._post("/reset", body, Retry.CONNECT)

    async def step(self, episode_id: str, action: str | dict[str, Any]) -> dict[str, Any]:
        """Play `action` (a command, or an action object such as Mind2Web's); never retried
        once sent (a step is not idempotent)."""
        return await self._post("/step", {"episode_id": episode_id, "action": action},
                                Retry.CONNECT)

    async def close_episode(self, episode_id: str) -> dict[str, Any]:
        """Free the episode's server state; safe to repeat."""
        return await self._post("/close", {"episode_id": episode_id}, Retry.IDEMPOTENT)
