"""Data in and out of a store as files: the portable format (``_portable``), its export (``_export``)
and import (``_import``), other layers' data made into it (``_foreign``: mem0, chat logs), and
conversation files for ``add_conversation`` (``_conversation``). The facade opens these around the
store's parts; nothing here knows ``Memory``."""

from ._conversation import CONVERSATION_CHUNK, Conversation, SessionBatch, message_chunks, read_conversation_source
from ._export import Exporter
from ._foreign import chat_logs, with_content_ids
from ._import import Importer

__all__ = ["CONVERSATION_CHUNK", "Conversation", "Exporter", "Importer", "SessionBatch", "chat_logs",
           "message_chunks", "read_conversation_source", "with_content_ids"]
