"""The OpenAI-compatible chat client: timeouts, retries with backoff, and errors sorted by kind.

Works with any endpoint that speaks the chat-completions API (OpenAI, Ollama, vLLM, LM Studio,
llama.cpp). Endpoints differ in what they accept, so each request asks for the most structure the
endpoint has not refused yet: a strict JSON schema, then a non-strict one, then any JSON object,
then plain text; a 400 that names a parameter moves this endpoint and model one step down, once,
with one log line. `openai` is imported on first use, never at server start.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

from memory_mcp.base.errors import LLMPermanentError, LLMTransientError
from memory_mcp.memory.redaction import redact

log = logging.getLogger(__name__)

ResponseFormat = Literal["auto", "json_schema", "json_object", "none"]
# From the most structure to the least; `auto` starts at the top and falls as far as needed.
_FORMAT_STEPS = ("strict_schema", "schema", "json_object", "none")
_FIRST_STEP = {"auto": 0, "json_schema": 0, "json_object": 2, "none": 3}
_LAST_STEP = {"auto": 3, "json_schema": 1, "json_object": 2, "none": 3}
_FORMAT_WORDS = ("response_format", "json_schema", "strict", "schema", "json_object")


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 3
    base_delay: float = 1.0
    max_delay: float = 30.0

    def delay(self, attempt: int) -> float:
        """Exponential backoff with full jitter, so many clients retrying do not move in step."""
        return random.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))


@dataclass(frozen=True)
class Completion:
    text: str
    truncated: bool  # cut off at the output-token cap: the text is incomplete


@dataclass
class _Accepted:
    """What this endpoint and model have been seen to accept."""

    format_step: int
    token_parameter: str = "max_tokens"
    temperature: bool = True


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
        max_output_tokens: int = 4000,
        response_format: ResponseFormat = "auto",
    ) -> None:
        self.model = model
        self._retry = retry
        self._base_url = base_url
        self._api_key = api_key
        self._timeout = timeout
        self._max_output_tokens = max_output_tokens
        self._format_setting = response_format
        self._accepted = _Accepted(format_step=_FIRST_STEP[response_format])
        self._accepted_lock = threading.Lock()

    def complete(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any] | None = None,
        cancel: threading.Event | None = None,
    ) -> Completion:
        """One chat completion, asked to follow `schema` as far as the endpoint allows; raises
        LLMTransientError or LLMPermanentError."""
        cancel = cancel or threading.Event()
        last_error: LLMTransientError | None = None
        for attempt in range(self._retry.attempts):
            if attempt and cancel.wait(self._retry.delay(attempt - 1)):
                break
            if cancel.is_set():
                break
            try:
                return self._complete_adapting(messages, schema, cancel)
            except LLMTransientError as exc:
                log.warning("LLM call failed (attempt %d of %d): %s", attempt + 1, self._retry.attempts, exc)
                last_error = exc
        if cancel.is_set():
            raise LLMTransientError("the update was cancelled (its memory is being erased or replaced)")
        assert last_error is not None
        raise last_error

    def _complete_adapting(
        self, messages: list[dict[str, str]], schema: dict[str, Any] | None, cancel: threading.Event
    ) -> Completion:
        """An attempt, repeated at once with less asked of the endpoint each time it refuses a
        parameter by name (at most once per parameter it could refuse)."""
        while True:
            with self._accepted_lock:
                accepted = _Accepted(**vars(self._accepted))
            request = self._request(messages, schema, accepted)
            try:
                return self._complete_once(request, cancel)
            except _RefusedParameter as refused:
                if not self._step_down(accepted, refused):
                    raise LLMPermanentError(
                        f"LLM endpoint refused the request for model {self.model!r} (400: {refused.message}): "
                        "check llm_model and the key"
                    ) from None

    def _request(
        self, messages: list[dict[str, str]], schema: dict[str, Any] | None, accepted: _Accepted
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "messages": messages}
        request[accepted.token_parameter] = self._max_output_tokens
        if accepted.temperature:
            request["temperature"] = 0
        step = _FORMAT_STEPS[accepted.format_step]
        if schema is not None and step in ("strict_schema", "schema"):
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "memory_update", "schema": schema, "strict": step == "strict_schema"},
            }
        elif schema is not None and step == "json_object":
            request["response_format"] = {"type": "json_object"}
        return request

    def _step_down(self, tried: _Accepted, refused: _RefusedParameter) -> bool:
        """Stop sending what the endpoint refused; False when nothing is left to give up."""
        with self._accepted_lock:
            accepted = self._accepted
            if refused.names("max_tokens") and "max_completion_tokens" in refused.message:
                accepted.token_parameter = "max_completion_tokens"
                change = "max_completion_tokens instead of max_tokens"
            elif refused.names("temperature") and tried.temperature:
                accepted.temperature = False
                change = "no temperature"
            elif refused.names(*_FORMAT_WORDS) and tried.format_step < _LAST_STEP[self._format_setting]:
                accepted.format_step = max(accepted.format_step, tried.format_step + 1)
                change = f"response format {_FORMAT_STEPS[accepted.format_step]}"
            else:
                return False
        log.warning(
            "LLM endpoint %s (model %s) refused a parameter (%s); sending %s from now on",
            self._base_url or "api.openai.com",
            self.model,
            refused.message[:200],
            change,
        )
        return True

    def _complete_once(self, request: dict[str, Any], cancel: threading.Event) -> Completion:
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

        def send() -> None:
            try:
                outcome["response"] = client.chat.completions.create(**request)
            except Exception as exc:  # handed to the caller's thread, classified there
                outcome["error"] = exc

        worker = threading.Thread(target=send, name="llm-request", daemon=True)
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
            raise _classified(outcome["error"], self.model, self._api_key) from outcome["error"]
        return _completion(outcome["response"])


def _completion(response: Any) -> Completion:
    choices = getattr(response, "choices", None)
    choice = choices[0] if choices else None
    content = choice.message.content if choice is not None and choice.message is not None else None
    truncated = choice is not None and choice.finish_reason == "length"
    if not content and not truncated:
        raise LLMTransientError("LLM endpoint returned an empty reply")
    return Completion(text=content or "", truncated=truncated)


class _RefusedParameter(Exception):
    """A 400 from the endpoint; `names` tells whether it blames a given parameter."""

    def __init__(self, message: str, parameter: str) -> None:
        super().__init__(message)
        self.message = message
        self._parameter = parameter

    def names(self, *words: str) -> bool:
        text = f"{self._parameter} {self.message}".lower()
        return any(word in text for word in words)


def _classified(exc: Exception, model: str, api_key: str | None) -> Exception:
    """Worth retrying, not until the configuration changes, or a parameter to stop sending. A
    refusal names the model asked for and says what the endpoint said (a 404 is most often a
    model the endpoint does not have)."""
    import openai

    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError):
        return LLMTransientError(f"LLM endpoint unreachable or too slow: {type(exc).__name__}")
    if isinstance(exc, openai.RateLimitError):
        return LLMTransientError("LLM endpoint is rate limiting (429)")
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code in (400, 422):
            return _RefusedParameter(_error_message(exc, api_key), _error_parameter(exc))
        if exc.status_code >= 500 or exc.status_code in (408, 409):
            return LLMTransientError(f"LLM endpoint error {exc.status_code}")
        return LLMPermanentError(
            f"LLM endpoint refused the request for model {model!r} ({exc.status_code}: {_error_message(exc, api_key)}): "
            "check llm_model and the key"
        )
    # openai.APIError, or ValueError: a 200 whose body is not JSON (cut off, or a proxy's HTML page).
    return LLMTransientError(f"LLM endpoint returned an unusable response: {type(exc).__name__}")


def _error_message(exc: Any, api_key: str | None) -> str:
    """What the endpoint said, on one line; without the key or any secret (an endpoint may quote
    the key it refused, and this message reaches tool results and logs)."""
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    message = " ".join(
        str((error.get("message") if isinstance(error, dict) else None) or exc.message or "bad request").split()
    )
    if api_key:
        message = message.replace(api_key, "[the key]")
    return redact(message)[:500]


def _error_parameter(exc: Any) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    return str(error.get("param") or "") if isinstance(error, dict) else ""
