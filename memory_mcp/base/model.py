"""The base of every pydantic model of the package."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    """A pydantic model whose validator is built when first used, not when its module is imported:
    a hook or a command imports some seventy models and uses a few (building them all took ~45 ms
    of every cold start)."""

    model_config = ConfigDict(defer_build=True)
