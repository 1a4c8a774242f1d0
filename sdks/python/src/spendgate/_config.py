"""Client settings: from arguments first, then the environment, then defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from ._version import __version__

DEFAULT_BASE_URL = "http://127.0.0.1:3000"
DEFAULT_PROXY_URL = "http://127.0.0.1:8787"
USER_AGENT = f"spendgate-python/{__version__}"


@dataclass(frozen=True)
class Settings:
    """Resolved settings of one client."""

    api_key: str
    base_url: str
    proxy_url: str
    timeout: float
    max_retries: int
    max_retry_delay: float
    user_agent: str


def resolve_settings(
    api_key: Optional[str],
    base_url: Optional[str],
    proxy_url: Optional[str],
    timeout: float,
    max_retries: int,
    max_retry_delay: float,
) -> Settings:
    """Settings from the arguments, else ``SPENDGATE_API_KEY``, ``SPENDGATE_BASE_URL``
    and ``SPENDGATE_PROXY_URL``, else the local defaults.

    Raises:
        ValueError: no API key anywhere, a provider key given where a spendgate key
            belongs, or a negative timeout or retry count.
    """
    key = api_key or os.environ.get("SPENDGATE_API_KEY", "")
    if not key:
        raise ValueError("no API key: pass api_key= or set SPENDGATE_API_KEY")
    if not key.startswith("svc_"):
        raise ValueError("api_key is not a spendgate key (svc_live_sk_...); provider keys go to the provider SDK")
    if timeout <= 0 or max_retries < 0 or max_retry_delay < 0:
        raise ValueError("timeout must be positive, max_retries and max_retry_delay not negative")
    base = base_url or os.environ.get("SPENDGATE_BASE_URL") or DEFAULT_BASE_URL
    proxy = proxy_url or os.environ.get("SPENDGATE_PROXY_URL") or DEFAULT_PROXY_URL
    return Settings(
        api_key=key,
        base_url=base.rstrip("/"),
        proxy_url=proxy.rstrip("/"),
        timeout=timeout,
        max_retries=max_retries,
        max_retry_delay=max_retry_delay,
        user_agent=USER_AGENT,
    )
