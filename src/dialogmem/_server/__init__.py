"""The REST and MCP servers (the ``server`` extra: FastAPI, uvicorn, mcp).

Importing this package imports none of them; ``create_app`` and ``build_mcp`` load them on use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._app import create_app
    from ._mcp import build_mcp

__all__ = ["build_mcp", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from ._app import create_app

        return create_app
    if name == "build_mcp":
        from ._mcp import build_mcp

        return build_mcp
    raise AttributeError(name)
