"""What every route needs: the open store, the caller's key, the server settings."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from .._apikeys import ApiKey
from .._facade._memory import Memory
from .._settings import ServerSettings


async def _memory(request: Request) -> Memory:
    memory: Memory = request.app.state.memory  # set by create_app
    return memory


async def _key(request: Request) -> ApiKey:
    key: ApiKey = request.state.key  # set by KeyAuth for every /v1 path
    return key


async def _settings(request: Request) -> ServerSettings:
    settings: ServerSettings = request.app.state.settings
    return settings


MemoryDep = Annotated[Memory, Depends(_memory)]
KeyDep = Annotated[ApiKey, Depends(_key)]
SettingsDep = Annotated[ServerSettings, Depends(_settings)]
