"""``package.module:callable`` settings (``credentialProvider``, ``metricsProvider``): the callable
imported where it runs and called, each failure a :class:`ConfigError` naming the setting. What it
raised is named by type only (a credential provider's message may hold a token). Pure."""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import ConfigError


def call_factory(path: str, name: str, returns: str) -> Any:
    """What ``path`` (``package.module:callable``) returns when called; ``name``: the setting as
    the caller spells it in messages; ``returns``: what it must return, for the message."""
    module_name, _, attr = path.partition(":")
    try:
        factory: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"{name} = {path!r}: module {module_name!r} does not import here ({exc}). It must "
            "import where Spark runs it (the driver, and every executor for a credential "
            "provider): install it there, or ship it with the job (`eventbus pyfiles --out "
            "deps.zip`, then add your module to the zip, or pass it with spark-submit "
            "--py-files).") from None
    for part in attr.split("."):
        factory = getattr(factory, part, None)
    if not callable(factory):
        raise ConfigError(f"{name} = {path!r}: {module_name!r} has no callable {attr!r}.")
    try:
        return factory()
    except Exception as exc:
        raise ConfigError(f"{name} = {path!r}: calling it raised {type(exc).__name__}; it must "
                          f"return {returns}.") from None
