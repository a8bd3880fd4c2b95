"""The OpenAI-compatible chat client: timeouts, retries with backoff, and errors sorted by kind.

Works with any endpoint that speaks the chat-completions API (OpenAI, Ollama, vLLM, LM Studio).
`openai` is imported on first use, never at server start.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

from memory_mcp.errors import LLMPermanentError, LLMTransientError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 3
    base_delay: float = 1.0
    max_delay: float = 30.0

    def delay(self, attempt: int) -> float:
        """Exponential backoff with full jitter, so many clients retrying do not move in step."""
        return random.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))


class ChatClient:
    """One chat completion at a time, retried on transient failures.

    Each attempt has a deadline for the whole reply (the HTTP client's own timeout applies to
    each read, so an endpoint trickling its answer would never time out) and can be cancelled:
    both close that attempt's connection and raise at once.
    """

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        model: str,
        timeout: float,
        retry: RetryPolicy,
    ) -> None:
        self.model = model
        self._retry = retry
        self._base_url = base_url
        self._api_key = api_key
        self._timeout = timeout

    def complete(self, messages: list[dict[str, str]], cancel: threading.Event | None = None) -> str:
        """The reply text of one chat completion; raises LLMTransientError or LLMPermanentError."""
        cancel = cancel or threading.Event()
        last_error: LLMTransientError | None = None
        for attempt in range(self._retry.attempts):
            if attempt and cancel.wait(self._retry.delay(attempt - 1)):
                break
            if cancel.is_set():
                break
            try:
                return self._complete_once(messages, cancel)
            except LLMTransientError as exc:
                log.warning("LLM call failed (attempt %d of %d): %s", attempt + 1, self._retry.attempts, exc)
                last_error = exc
        if cancel.is_set():
            raise LLMTransientError("the update was cancelled (its memory is being erased or replaced)")
        assert last_error is not None
        raise last_error

    def _complete_once(self, messages: list[dict[str, str]], cancel: threading.Event) -> str:
        import openai

        # A client per attempt: closing it aborts this request and no other.
        client = openai.OpenAI(
            # Local endpoints (Ollama, vLLM) need no key, but the client insists on one.
            base_url=self._base_url,
            api_key=self._api_key or "not-needed",
            timeout=self._timeout,
            max_retries=0,
        )
        outcome: dict[str, Any] = {}

        def request() -> None:
            try:
                outcome["response"] = client.chat.completions.create(model=self.model, messages=messages, temperature=0)
            except Exception as exc:  # handed to the caller's thread, classified there
                outcome["error"] = exc

        worker = threading.Thread(target=request, name="llm-request", daemon=True)
        worker.start()
        deadline = time.monotonic() + self._timeout
        while worker.is_alive():
            worker.join(timeout=min(0.1, max(0.0, deadline - time.monotonic())))
            if worker.is_alive() and (cancel.is_set() or time.monotonic() >= deadline):
                client.close()
                if cancel.is_set():
                    raise LLMTransientError("the update was cancelled (its memory is being erased or replaced)")
                raise LLMTransientError(f"LLM endpoint too slow: no complete reply within {self._timeout:g} s")
        client.close()
        if "error" in outcome:
            raise _classified(outcome["error"]) from outcome["error"]
        choices = getattr(outcome["response"], "choices", None)
        content = choices[0].message.content if choices else None
        if not content:
            raise LLMTransientError("LLM endpoint returned an empty reply")
        return content


def _classified(exc: Exception) -> LLMTransientError | LLMPermanentError:
    """Worth retrying, or not until the configuration changes."""
    import openai

    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError):
        return LLMTransientError(f"LLM endpoint unreachable or too slow: {type(exc).__name__}")
    if isinstance(exc, openai.RateLimitError):
        return LLMTransientError("LLM endpoint is rate limiting (429)")
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code >= 500 or exc.status_code in (408, 409):
            return LLMTransientError(f"LLM endpoint error {exc.status_code}")
        return LLMPermanentError(f"LLM endpoint refused the request ({exc.status_code}): check model and key")
    # openai.APIError, or ValueError: a 200 whose body is not JSON (cut off, or a proxy's HTML page).
    return LLMTransientError(f"LLM endpoint returned an unusable response: {type(exc).__name__}")
