"""The SDK's token-verifier hook over the token registry: a known bearer token authenticates its user."""

from __future__ import annotations

from mcp.server.auth.provider import AccessToken

from memory_mcp.service.access import TokenRegistry, token_user

MEMORY_SCOPE = "memory"


class RegistryTokenVerifier:
    """The SDK's token-verifier hook over the registry: a known token authenticates its user."""

    def __init__(self, registry: TokenRegistry) -> None:
        self.registry = registry

    async def verify_token(self, token: str) -> AccessToken | None:
        user_id = token_user(self.registry, token)
        if user_id is None:
            return None
        return AccessToken(token=token, client_id=user_id, subject=user_id, scopes=[MEMORY_SCOPE])
