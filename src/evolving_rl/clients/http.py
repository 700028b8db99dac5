"""The HTTP edge shared by every async client: sessions, JSON POSTs, timeouts and retries.

Owns the only place where aiohttp exceptions are caught. Every failure leaves as one of two
exceptions the pipeline maps to statuses: `TransportError` (no usable answer: connection refused,
reset, timeout) and `ServerError` (an HTTP error status or a body that is not a JSON object).

Retries are bounded and idempotence-aware: `Retry.CONNECT` retries only when the request was
certainly not processed: the connection was refused before anything was sent, or the server
answered 503 (at capacity; our servers refuse before doing anything). That is safe for every call,
including `/step`. `Retry.IDEMPOTENT` also retries timeouts, resets and other 5xx answers (only for
read-only calls such as `/search`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from enum import Enum
from typing import Any

import aiohttp

logger = logging.getLogger(__name__)


class TransportError(ConnectionError):
    """No usable answer from the server (refused, reset, timed out)."""


class ServerError(RuntimeError):
    """The server answered with an error status or a malformed body."""

    def __init__(self, url: str, status: int, detail: str) -> None:
        super().__init__(f"{url}: HTTP {status}: {detail[:300]}")
        self.status = status


class Retry(Enum):
    NONE = "none"
    CONNECT = "connect"
    IDEMPOTENT = "idempotent"


@dataclass(frozen=True)
class RetryPolicy:
    """How many extra attempts a call may make, and the base of the exponential backoff."""

    max_retries: int
    backoff_s: float


def new_session(pool_size: int, timeout_s: float) -> aiohttp.ClientSession:
    """A session with a connection pool of `pool_size` and a total timeout per request.

    Must be called inside a running event loop; the caller closes it.
    """
    connector = aiohttp.TCPConnector(limit=pool_size, limit_per_host=pool_size)
    return aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s))


def _retryable(error: Exception, mode: Retry) -> bool:
    if mode is Retry.NONE:
        return False
    if isinstance(error, aiohttp.ClientConnectorError):
        return True  # refused before anything was sent: nothing reached the server
    if isinstance(error, ServerError) and error.status == 503:
        return True  # at capacity: refused before processing
    if mode is Retry.IDEMPOTENT:
        return isinstance(error, (aiohttp.ClientConnectionError, asyncio.TimeoutError)) or (
            isinstance(error, ServerError) and error.status >= 500)
    return False


async def _post_once(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                     timeout_s: float | None) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s else None
    try:
        async with session.post(url, json=body, timeout=timeout) as response:
            if response.status >= 400:
                raise ServerError(url, response.status, await response.text())
            try:
                data = await response.json(content_type=None)
            except ValueError as error:
                raise ServerError(url, response.status, f"invalid JSON: {error}") from None
    except (aiohttp.ClientError, asyncio.TimeoutError) as error:
        raise TransportError(f"{url}: {type(error).__name__}: {error}") from error
    if not isinstance(data, dict):
        raise ServerError(url, response.status, "body is not a JSON object")
    return data


async def post_json(session: aiohttp.ClientSession, url: str, body: dict[str, Any], *,
                    retry: Retry, policy: RetryPolicy,
                    timeout_s: float | None = None) -> dict[str, Any]:
    """POST `body` as JSON and return the decoded object, retrying only as `retry` allows."""
    attempt = 0
    while True:
        try:
            return await _post_once(session, url, body, timeout_s)
        except (TransportError, ServerError) as error:
            cause = error.__cause__ if isinstance(error, TransportError) else error
            if attempt >= policy.max_retries or not _retryable(cause, retry):
                raise
            attempt += 1
            delay = policy.backoff_s * 2 ** (attempt - 1)
            logger.warning("retrying %s in %.2fs (attempt %d): %s", url, delay, attempt, error)
            await asyncio.sleep(delay)


async def post_ok(session: aiohttp.ClientSession, url: str, body: dict[str, Any], *,
                  timeout_s: float) -> None:
    """POST `body` once for its effect; any 2xx answer is success, whatever its body (SGLang's
    `/abort_request` answers an empty 200). Errors as in `post_json`, never retried."""
    try:
        async with session.post(url, json=body,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            if response.status >= 400:
                raise ServerError(url, response.status, await response.text())
    except (aiohttp.ClientError, asyncio.TimeoutError) as error:
        raise TransportError(f"{url}: {type(error).__name__}: {error}") from error


async def get_json(session: aiohttp.ClientSession, url: str,
                   timeout_s: float | None = None) -> dict[str, Any]:
    """GET a JSON object (health checks); errors as in `post_json`, never retried."""
    timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s else None
    try:
        async with session.get(url, timeout=timeout) as response:
            if response.status >= 400:
                raise ServerError(url, response.status, await response.text())
            data = await response.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError) as error:
        raise TransportError(f"{url}: {type(error).__name__}: {error}") from error
    except ValueError as error:
        raise ServerError(url, 200, f"invalid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ServerError(url, 200, "body is not a JSON object")
    return data
