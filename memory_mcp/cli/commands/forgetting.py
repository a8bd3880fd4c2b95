"""Commands that take things out of memory: `forget` (a user, an agent, an exchange) and `scrub`
(secrets and private spans in what is already stored)."""

from __future__ import annotations

import argparse
import sys

from memory_mcp.cli.commands.checks import confirmed, require_stored
from memory_mcp.cli.commands.output import console, emit
from memory_mcp.models import ForgetExchangeRequest, ForgetExchangeResult, ForgetRequest, ForgetResult
from memory_mcp.service.memory_service import MemoryService


def forget(service: MemoryService, args: argparse.Namespace) -> int:
    require_stored(service, args.user, args.agent)
    scope = args.user + (f"/{args.agent}" if args.agent else "")
    what = f"exchange {args.exchange} of {scope}" if args.exchange else f"everything stored for {scope}"
    if not args.exchange and not args.agent:
        what += " and all their agents"
    if not args.yes and not confirmed(f"Erase {what}", [args.user]):
        print("memory-mcp forget: not confirmed; nothing was erased", file=sys.stderr)
        return 1
    result: ForgetResult | ForgetExchangeResult
    if args.exchange:
        result = service.forget_exchange(
            ForgetExchangeRequest.build(user_id=args.user, agent_name=args.agent, exchange_id=args.exchange)
        )
    else:
        result = service.forget(ForgetRequest.build(user_id=args.user, agent_name=args.agent, confirm=args.user))
    return emit(args, result, lambda: console().change(result))


def scrub(service: MemoryService, args: argparse.Namespace) -> int:
    result = service.scrub(args.user)
    return emit(args, result, lambda: console().change(result))
