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
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from memory_mcp.errors import MemoryServiceError
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
) -> Callable[..., Any]:
    """A function named `name`, with `request`'s fields as its parameters, that builds the request
    from its arguments and hands it to `handle` (awaited when it is a coroutine function)."""
    signature = signature_of(request, returns)

    def build(args: tuple[Any, ...], kwargs: dict[str, Any]) -> RequestT:
        return as_tool_errors(request.build)(**signature.bind(*args, **kwargs).arguments)

    if inspect.iscoroutinefunction(handle):

        async def tool(*args: Any, **kwargs: Any) -> Any:
            return await handle(build(args, kwargs))

    else:

        def tool(*args: Any, **kwargs: Any) -> Any:
            return as_tool_errors(handle)(build(args, kwargs))

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = description
    tool.__signature__ = signature  # type: ignore[attr-defined]
    tool.__annotations__ = {
        **{parameter.name: parameter.annotation for parameter in signature.parameters.values()},
        "return": returns,
    }
    return tool
