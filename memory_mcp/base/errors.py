"""The service's exception set. The MCP and CLI edges translate these once, at the edge."""

from __future__ import annotations


class MemoryServiceError(Exception):
    """Base of every error the service raises on purpose; its message is meant for the caller."""


class InvalidInput(MemoryServiceError):
    """The request breaks a rule; nothing was written. The message names the field and the rule."""


class NotFound(MemoryServiceError):
    """The request names something that does not exist."""


class StorageError(MemoryServiceError):
    """Stored data could not be read or written; the message says what was left as it was."""


class MemoryGone(StorageError):
    """The memory a background write meant to update was erased (or erased and started anew)
    meanwhile: the write is dropped, never recreating what was forgotten."""


class LogReplaced(MemoryGone):
    """Exchanges were erased (their log rewritten or removed) while a caller was reading them:
    nothing of the erased ones is read back; reading the log again gives what is kept."""


class LLMError(MemoryServiceError):
    """The LLM endpoint did not give a usable answer; pending work stays pending."""


class LLMTransientError(LLMError):
    """Worth retrying: timeout, connection failure, rate limit, server error, unparseable reply."""


class LLMPermanentError(LLMError):
    """Retrying will not help until the configuration changes: bad key, unknown model, bad request."""
