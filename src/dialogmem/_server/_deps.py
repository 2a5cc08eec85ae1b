"""What every route needs: the open store, the caller's key, the server settings."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from .._apikeys import ApiKey
from .._memory import Memory
from .._settings import ServerSettings


async def _memory(request: Request) -> Memory:
    return request.app.state.memory  # type: ignore[no-any-return]


async def _key(request: Request) -> ApiKey:
    return request.state.key  # type: ignore[no-any-return]  # set by KeyAuth for every /v1 path


async def _settings(request: Request) -> ServerSettings:
    return request.app.state.settings  # type: ignore[no-any-return]


MemoryDep = Annotated[Memory, Depends(_memory)]
KeyDep = Annotated[ApiKey, Depends(_key)]
SettingsDep = Annotated[ServerSettings, Depends(_settings)]
