"""The OpenAI-compatible chat client: timeouts, retries with backoff, and errors sorted by kind.

Works with any endpoint that speaks the chat-completions API (OpenAI, Ollama, vLLM, LM Studio).
`openai` is imported on first use, never at server start.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
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
    """One chat completion at a time, retried on transient failures."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        model: str,
        timeout: float,
        retry: RetryPolicy,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.model = model
        self._retry = retry
        self._sleep = sleep
        self._base_url = base_url
        self._api_key = api_key
        self._timeout = timeout
        self._client: Any = None

    def complete(self, messages: list[dict[str, str]]) -> str:
        """The reply text of one chat completion; raises LLMTransientError or LLMPermanentError."""
        last_error: LLMTransientError | None = None
        for attempt in range(self._retry.attempts):
            if attempt:
                self._sleep(self._retry.delay(attempt - 1))
            try:
                return self._complete_once(messages)
            except LLMTransientError as exc:
                log.warning("LLM call failed (attempt %d of %d): %s", attempt + 1, self._retry.attempts, exc)
                last_error = exc
        assert last_error is not None
        raise last_error

    def _complete_once(self, messages: list[dict[str, str]]) -> str:
        import openai

        client = self._openai()
        try:
            response = client.chat.completions.create(model=self.model, messages=messages, temperature=0)
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            raise LLMTransientError(f"LLM endpoint unreachable or too slow: {type(exc).__name__}") from exc
        except openai.RateLimitError as exc:
            raise LLMTransientError("LLM endpoint is rate limiting (429)") from exc
        except openai.APIStatusError as exc:
            if exc.status_code >= 500 or exc.status_code in (408, 409):
                raise LLMTransientError(f"LLM endpoint error {exc.status_code}") from exc
            raise LLMPermanentError(
                f"LLM endpoint refused the request ({exc.status_code}): check model and key"
            ) from exc
        except (openai.APIError, ValueError) as exc:
            # ValueError: a 200 whose body is not JSON (cut off, or a proxy's HTML page).
            raise LLMTransientError(f"LLM endpoint returned an unusable response: {type(exc).__name__}") from exc
        choices = getattr(response, "choices", None)
        content = choices[0].message.content if choices else None
        if not content:
            raise LLMTransientError("LLM endpoint returned an empty reply")
        return content

    def _openai(self) -> Any:
        if self._client is None:
            import openai

            # Local endpoints (Ollama, vLLM) need no key, but the client insists on one.
            self._client = openai.OpenAI(
                base_url=self._base_url, api_key=self._api_key or "not-needed", timeout=self._timeout, max_retries=0
            )
        return self._client
