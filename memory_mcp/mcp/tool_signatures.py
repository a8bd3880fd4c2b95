"""Tool callables made from request models: the model is the one source of a tool's parameters.

The MCP SDK publishes a tool's input schema from its function's signature. Here the signature is
made from the tool's request model (each field, in order, with its type, description, default,
bounds, pattern and validators), so what is published is exactly what is validated; and the
function's body builds that same model from its arguments, so every caller — the SDK, the tests,
anything calling the tools in process — meets the same rules and the same error messages.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, ParamSpec, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from memory_mcp.base.errors import MemoryServiceError
from memory_mcp.models import ToolRequest

P = ParamSpec("P")
R = TypeVar("R")
RequestT = TypeVar("RequestT", bound=ToolRequest)


def as_tool_errors(function: Callable[P, R]) -> Callable[P, R]:
    """Turn the service's deliberate errors into MCP tool errors carrying their message.

    Anything else propagates: the SDK reports it as a tool error and logs the traceback, and
    the server keeps serving.
    """

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except MemoryServiceError as exc:
            raise ToolError(str(exc)) from exc

    return wrapper


def published_schema(schema: Any) -> Any:
    """A request model's JSON schema as a host's model reads it, every token paid in each
    conversation: without the titles pydantic derives from field names nor the docstrings of the
    models it refers to, and an optional field as its own type rather than "that or null, default
    null" (leaving it out says the same; null is still accepted)."""
    if isinstance(schema, list):
        return [published_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    compact = {
        key: published_schema(value) for key, value in schema.items() if not (key == "title" and isinstance(value, str))
    }
    if compact.get("additionalProperties") is True:
        compact.pop("additionalProperties")  # what JSON Schema assumes anyway
    for definition in compact.get("$defs", {}).values():
        definition.pop("description", None)  # a model's docstring, written for engineers
    branches = compact.get("anyOf")
    if isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches:
        [kept] = [branch for branch in branches if branch != {"type": "null"}]
        compact.pop("anyOf")
        if compact.get("default", ...) is None:
            compact.pop("default")
        compact = {**kept, **compact}
    return compact


def signature_of(model: type[BaseModel], returns: Any = inspect.Signature.empty) -> inspect.Signature:
    """A function signature with one parameter per field of `model`, each carrying the field's
    type and everything pydantic knows of it (the default goes to the parameter itself)."""
    parameters = []
    for name, field in model.model_fields.items():
        info = copy.copy(field)
        info.default, info.default_factory = PydanticUndefined, None
        parameters.append(
            inspect.Parameter(
                name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=inspect.Parameter.empty if field.is_required() else field.default,
                annotation=Annotated[(field.annotation, info)],
            )
        )
    return inspect.Signature(parameters, return_annotation=returns)


def tool_function(
    name: str,
    description: str,
    request: type[RequestT],
    returns: Any,
    handle: Callable[[RequestT], R] | Callable[[RequestT], Awaitable[R]],
    text: Callable[[Any], str] | None = None,
) -> Callable[..., Any]:
    """A function named `name`, with `request`'s fields as its parameters, that builds the request
    from its arguments and hands it to `handle` (awaited when it is a coroutine function).

    With `text`, it returns what an MCP host receives: the result as structured content (its
    schema published as the tool's output schema) and `text(result)` as what the model reads."""
    signature = signature_of(request, returns)

    def build(args: tuple[Any, ...], kwargs: dict[str, Any]) -> RequestT:
        return as_tool_errors(request.build)(**signature.bind(*args, **kwargs).arguments)

    def answer(result: Any) -> Any:
        if text is None:
            return result
        return CallToolResult(
            content=[TextContent(type="text", text=text(result))], structured_content=result.model_dump(mode="json")
        )

    async def awaited_tool(*args: Any, **kwargs: Any) -> Any:
        result = handle(build(args, kwargs))
        return answer(await result if inspect.isawaitable(result) else result)

    def plain_tool(*args: Any, **kwargs: Any) -> Any:
        return answer(as_tool_errors(handle)(build(args, kwargs)))

    tool: Callable[..., Any] = awaited_tool if inspect.iscoroutinefunction(handle) else plain_tool

    published = returns if text is None else Annotated[CallToolResult, returns]
    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = description
    tool.__signature__ = signature.replace(return_annotation=published)  # type: ignore[attr-defined]
    tool.__annotations__ = {
        **{parameter.name: parameter.annotation for parameter in signature.parameters.values()},
        "return": published,
    }
    return tool
