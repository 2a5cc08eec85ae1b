"""Models: sentence embedders and the one LLM client every stage shares."""

from ._embed import LocalEmbedder, OpenAIEmbedder, minilm_dir
from ._embed_base import Embedder
from ._factory import make_embedder, make_llm
from ._json_repair import JSONRepairError, extract_json
from ._llm import BaseLLM, ChatReply, ChatRequest, NoLLM, TransientLLMError, parse_output
from ._llm_base import ChatMessage, LLMClient
from ._llm_llamacpp import LlamaCppLLM
from ._llm_openai import OpenAICompatibleLLM
from ._scripted import ScriptedCall, ScriptedLLM

__all__ = [
    "BaseLLM",
    "ChatMessage",
    "ChatReply",
    "ChatRequest",
    "Embedder",
    "JSONRepairError",
    "LLMClient",
    "LlamaCppLLM",
    "LocalEmbedder",
    "NoLLM",
    "OpenAICompatibleLLM",
    "OpenAIEmbedder",
    "ScriptedCall",
    "ScriptedLLM",
    "TransientLLMError",
    "extract_json",
    "make_embedder",
    "make_llm",
    "minilm_dir",
    "parse_output",
]
