"""Secrets are never kept: what people paste (keys, tokens, passwords) is replaced by a typed
placeholder before anything is stored, indexed, embedded, exported or sent to the LLM, and
`<private>…</private>` spans are dropped whole.

Detection is Yelp's detect-secrets: its plugins know the shapes of the providers' keys (AWS,
Azure, GitHub, GitLab, Slack, Stripe, OpenAI, Twilio, SendGrid, npm, PyPI, Discord, Telegram,
Mailchimp, JWTs, basic-auth URLs, `password=`-style assignments) and are kept up to date by
people who track them, and its heuristics keep references (`os.environ["KEY"]`, `${TOKEN}`) out.
Its entropy plugins are left out: commit SHAs, UUIDs and content hashes are exactly what they
flag. Around it, what it does not do for text typed in a chat:
- a value it reports is widened to the whole token (it reports `ghp` of a GitHub token, and an
  OpenAI or JSON web token cut short);
- a private key is erased as its whole block (it reports the header line only);
- a few shapes it has no plugin for: Anthropic, Google and Hugging Face keys, an environment
  variable named for a secret (`export SECRET_KEY=…`), and a password said in words ("my password
  is hunter2", when the word that follows looks like one: a digit or a symbol in it).
"""

from __future__ import annotations

import functools
import re
from typing import Any, TypeVar

from pydantic import BaseModel

PLACEHOLDER = "[redacted: {kind}]"

_PRIVATE_SPAN = re.compile(r"<private>.*?(?:</private>|\Z)", re.IGNORECASE | re.DOTALL)
_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
# Shapes detect-secrets has no plugin for: (pattern, kind).
_OWN_SHAPES = [
    (re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}"), "anthropic key"),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), "google api key"),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), "hugging face token"),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}"), "github token"),
    # An AWS secret key named in prose ("our AWS key is …"): 40 characters of base64 with capitals,
    # small letters and digits (a commit SHA has no capitals).
    (
        re.compile(
            r"(?i:\baws\b).*?(?<![A-Za-z0-9/+])((?=[^\s]*[A-Z])(?=[^\s]*[a-z])(?=[^\s]*\d)[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        "aws secret key",
    ),
]
# An environment variable named for a secret, set on the line: `export SECRET_KEY=…`.
_SECRET_VARIABLE = re.compile(
    r"\b[A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|KEY)\s*[=:]\s*[\"']?([^\s\"'${][^\s\"',]{7,})"
)
# The name a value is assigned to, just before it; its last word says whether it holds a secret
# (`api_key_header_name = "X-API-Key"` names a header, `PASSWORD_RESET_URL` an address).
_ASSIGNED_NAME = re.compile(r"([A-Za-z][A-Za-z0-9_.-]*)[\"']?\s*[=:]\s*[\"']?$")
_SECRET_WORDS = {"key", "token", "secret", "password", "passwd", "pwd", "pass", "credentials", "apikey", "pat"}
# A password said in words: the value must have a digit or a symbol, so "the password is stored
# in the vault" keeps its words.
_SAID_PASSWORD = re.compile(
    r"\b(?:password|passphrase|passwd|pwd|passcode)\s+(?:is|was|=|:)\s*[:=]?\s*[\"']?"
    r"(?=[^\s\"']*[0-9!@#$%^&*()_+=\[\]{};:,<>?/\\|~-])([^\s\"']{4,})",
    re.IGNORECASE,
)
# A line worth handing to the plugins: a long token, a keyword, credentials in a URL, a key block.
_CANDIDATE = re.compile(
    r"[A-Za-z0-9+/_=.-]{16,}|pass|pwd|secret|token|key|auth|credential|://[^\s/@]*:[^\s/@]*@|BEGIN",
    re.IGNORECASE,
)
_TOKEN_CHAR = re.compile(r"[A-Za-z0-9_\-+/=.~]")
# Config-style lines (`KEY=value`, `key: value`) are what KeywordDetector reads without quotes.
_AS_CONFIG = "pasted.yaml"
_KINDS = {
    "Basic Auth Credentials": "password",
    "JSON Web Token": "jwt",
    "Secret Keyword": "secret",
    "NPM tokens": "npm token",
}
_GENERIC_KINDS = {"secret", "password"}  # where a finding of a named kind covers the same text, it names it
_EXCLUDED_PLUGINS = {"Base64 High Entropy String", "Hex High Entropy String", "Public IP (ipv4)", "Private Key"}


def redact(text: str) -> str:
    """`text` without private spans and with every secret replaced by its typed placeholder."""
    if not text:
        return text
    text = _PRIVATE_SPAN.sub("", text)
    text = _PRIVATE_KEY_BLOCK.sub(PLACEHOLDER.format(kind="private key"), text)
    return "".join(_redacted_line(line) for line in text.splitlines(keepends=True))


# Fields that name or date something (ids other records refer to, times, categories, folders):
# never text someone typed into, and changing them would break what refers to them.
_NAMING_FIELDS = frozenset(
    [
        "page_id",
        "id",
        "fact_id",
        "user_id",
        "agent_name",
        "thread_id",
        "timestamp",
        "project",
        "category",
        "source",
        "replaces",
        "supersededBy",
        "createdAt",
        "updatedAt",
        "lastUpdated",
        "validFrom",
        "validTo",
        "expiresAt",
        "expires_at",
        "exported_at",
        "format",
        "version",
        "firstPageId",
        "mode",
    ]
)

ModelT = TypeVar("ModelT", bound=BaseModel)


def without_secrets(model: ModelT) -> ModelT:
    """`model` (a request, an import) with every string someone typed redacted: what it says,
    its metadata, facts and profile sections; its ids and times as they were."""
    return type(model).model_validate(_redacted_strings(model.model_dump(mode="json")))


def _redacted_strings(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redacted_strings(item) for item in value]
    if isinstance(value, dict):
        return {key: item if key in _NAMING_FIELDS else _redacted_strings(item) for key, item in value.items()}
    return value


def _redacted_line(line: str) -> str:
    if not _CANDIDATE.search(line):
        return line
    spans: list[tuple[int, int, str]] = []
    for pattern, kind in _OWN_SHAPES:
        spans += [
            (match.start(match.lastindex or 0), match.end(match.lastindex or 0), kind)
            for match in pattern.finditer(line)
        ]
    spans += [(match.start(1), match.end(1), "password") for match in _SAID_PASSWORD.finditer(line)]
    spans += [(match.start(1), match.end(1), "secret") for match in _SECRET_VARIABLE.finditer(line)]
    for secret_type, value in _detected(line):
        for match in re.finditer(re.escape(value), line):
            start, end = _widened(line, match.start(), match.end())
            spans.append((start, end, _kind(secret_type, line[:start])))
    if not spans:
        return line
    out: list[str] = []
    at = 0
    for start, end, kind in sorted(spans, key=lambda span: (span[0], span[2] in _GENERIC_KINDS, -span[1])):
        if start < at:  # overlaps the one before: that placeholder covers it too
            at = max(at, end)
            continue
        out += [line[at:start], PLACEHOLDER.format(kind=kind)]
        at = end
    return "".join(out) + line[at:]


def _detected(line: str) -> list[tuple[str, str]]:
    """(type, value) of what the plugins find in `line`, references and templates left out."""
    from detect_secrets.filters.heuristic import (
        is_indirect_reference,
        is_not_alphanumeric_string,
        is_prefixed_with_dollar_sign,
        is_templated_secret,
    )

    found = []
    for plugin in _plugins():
        for secret in plugin.analyze_line(filename=_AS_CONFIG, line=line, line_number=0):
            value = secret.secret_value
            if not value or is_templated_secret(value) or is_prefixed_with_dollar_sign(value):
                continue
            if secret.type == "Secret Keyword":
                # Read as configuration, a value runs to the end of the line; typed in a chat, the
                # secret is its first word.
                value = next(iter(value.split()), "")
                if not value or is_indirect_reference(line) or is_not_alphanumeric_string(value):
                    continue
                if not _names_a_secret(line[: line.find(value)]):
                    continue
            found.append((secret.type, value))
    return found


@functools.cache
def _plugins() -> list[Any]:
    """One instance of each detect-secrets plugin used (loaded on first need: ~0.2 s)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    mapping: dict[str, type[Any]] = get_mapping_from_secret_type_to_class()
    return [plugin() for secret_type, plugin in sorted(mapping.items()) if secret_type not in _EXCLUDED_PLUGINS]


def _names_a_secret(before: str) -> bool:
    """Whether the name a value is assigned to (at the end of `before`) is a secret's, by its last
    word; True when no name is assigned there (a password said in words)."""
    named = _ASSIGNED_NAME.search(before)
    if named is None:
        return True
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", named.group(1)).lower().replace(".", "_").replace("-", "_")
    return words.rstrip("_").rsplit("_", 1)[-1] in _SECRET_WORDS


def _widened(line: str, start: int, end: int) -> tuple[int, int]:
    """The whole token around line[start:end] (a plugin may report part of one), without the
    `=` of an assignment before it or a full stop after it."""
    while start > 0 and _TOKEN_CHAR.match(line[start - 1]) and line[start - 1] != "=":
        start -= 1
    while end < len(line) and _TOKEN_CHAR.match(line[end]):
        end += 1
    while end > start + 1 and line[end - 1] == ".":
        end -= 1
    return start, end


def _kind(secret_type: str, before: str) -> str:
    """The placeholder's name for what was found (`before`: the line up to it, which names a keyword's kind)."""
    if secret_type == "Secret Keyword":
        if re.search(r"aws.{0,20}secret", before, re.IGNORECASE):
            return "aws secret key"
        if re.search(r"pass|pwd", before[-40:], re.IGNORECASE):
            return "password"
    return _KINDS.get(secret_type) or secret_type.lower()
