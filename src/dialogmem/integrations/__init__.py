"""Adapters that plug dialogmem into other frameworks (each one an optional extra).

``dialogmem.integrations.langgraph``: ``DialogmemStore``, a LangGraph ``BaseStore`` over a ``Memory``
(``pip install 'dialogmem[langgraph]'``).
"""
