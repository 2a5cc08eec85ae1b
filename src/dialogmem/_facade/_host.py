"""What the verb groups mixed into ``Memory`` (``Offline``, ``Operations``) need from it."""

from __future__ import annotations

from contextlib import AbstractContextManager

from .._config import Config
from ._open import Parts


class FacadeHost:
    """The open store's parts and configuration, the call gate and the read-only check; ``Memory``
    provides them."""

    _parts: Parts
    config: Config

    def _call(self) -> AbstractContextManager[None]:
        raise NotImplementedError  # provided by Memory

    def _writable(self) -> None:
        raise NotImplementedError  # provided by Memory
