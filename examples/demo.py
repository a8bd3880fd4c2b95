"""A real MCP client session against the real stdio server: what `make demo` runs.

It starts `server.py` as a subprocess (exactly as Claude Desktop or Cursor would), stores a few
exchanges for two users (with the facts a host model passes along, as the server's instructions
ask when it has no LLM of its own), recalls them and prints the <memory> block a host injects, runs
the server's own extraction when OPENAI_API_KEY or OPENAI_BASE_URL is set, shows a profile, and
shows that one user cannot see the other's memory. Data goes to a temporary directory unless
--data-dir is given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

SERVER = Path(__file__).resolve().parent.parent / "server.py"

# (what the user said, what the assistant answered, what the host model learned from it)
ALICE: list[tuple[str, str, dict[str, Any]]] = [
    (
        "I'm Alice. I work on the billing service at Acme, mostly in Go.",
        "Nice to meet you, Alice! Go is a good fit for billing.",
        {
            "facts": [
                {"content": "Alice works on the billing service at Acme", "category": "context", "confidence": 0.95}
            ],
            "profile": {"workContext": "Alice works on the billing service at Acme, mostly in Go."},
        },
    ),
    ("My daughter Mia starts primary school in September.", "That's a big step. I hope Mia enjoys school!", {}),
    (
        "I prefer answers with code examples rather than long explanations.",
        "Understood: I'll lead with code.",
        {
            "facts": [
                {
                    "content": "Prefers answers that lead with code examples",
                    "category": "preference",
                    "confidence": 0.95,
                }
            ]
        },
    ),
    (
        "We're migrating billing from MySQL to PostgreSQL next quarter.",
        "A plan with dual writes and a backfill would make that safer.",
        {},
    ),
]
BOB: list[tuple[str, str, dict[str, Any]]] = [
    ("Hi, I'm Bob. I grow tomatoes and peppers in my allotment.", "Lovely! Tomatoes and peppers both love sun.", {}),
    ("My peppers got aphids last week.", "Try a soap spray, or bring in ladybirds.", {}),
]


def show(title: str, payload: Any, explanation: str = "") -> None:
    print(f"\n== {title}")
    if explanation:
        print(textwrap.fill(explanation, width=100, initial_indent="   ", subsequent_indent="   "))
    print(textwrap.indent(json.dumps(payload, indent=2, ensure_ascii=False), "   "))


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise SystemExit(f"{tool} failed: {result.content[0].text}")
    assert result.structured_content is not None
    return result.structured_content


def brief_pages(pages: list[dict[str, Any]]) -> list[str]:
    return [f"[{p.get('score', '-')}] {p['user_input']}" for p in pages]


async def run(data_dir: Path) -> dict[str, Any]:
    # A small short-term window, so that older exchanges must be found by retrieval.
    config = data_dir / "demo-config.json"
    config.write_text(json.dumps({"data_storage_path": str(data_dir), "short_term_capacity": 2}))
    parameters = StdioServerParameters(
        command=sys.executable, args=[str(SERVER), "--config", str(config)], env=_llm_environment()
    )
    async with Client(parameters) as client:
        tools = await client.list_tools()
        print(f"Connected to memory-mcp over stdio; data in {data_dir}")
        print("Tools:", ", ".join(tool.name for tool in tools.tools))

        for user_id, exchanges in (("alice", ALICE), ("bob", BOB)):
            for user_input, agent_response, learned in exchanges:
                added = await call(
                    client,
                    "add_memory",
                    {
                        "user_input": user_input,
                        "agent_response": agent_response,
                        "user_id": user_id,
                        "thread_id": "demo",
                        **learned,
                    },
                )
            print(f"Stored {len(exchanges)} exchanges for {user_id} (last page {added['page_id']})")

        recall = await call(
            client,
            "retrieve_memory",
            {"query": "When does my daughter start school?", "user_id": "alice", "max_results": 3},
        )
        show(
            "alice asks: When does my daughter start school? Recent exchanges",
            brief_pages(recall["short_term_memory"]),
            "The newest exchanges come back whatever the question (the short-term window, 2 here), "
            "oldest first and unscored: [-].",
        )
        show(
            "Older exchanges ranked for the question [score]",
            brief_pages(recall["retrieved_pages"]),
            "Older exchanges are searched for the question (BM25 over their words and their neighbours' in the "
            "same conversation): [score] is that relevance, higher is closer; unrelated ones are left out.",
        )
        print(f"\n== The <memory> block a host injects ({recall['context_tokens']} tokens)")
        print(textwrap.indent(recall["context"], "   "))
        flushed = await call(client, "flush_memory", {"user_id": "alice"})
        show(
            f"flush_memory for alice: structured memory comes from {flushed['extraction']}",
            {key: flushed[key] for key in ("pages_analysed", "facts_added", "sections_updated", "errors", "notes")},
            "flush_memory runs the server's own extraction now: with no LLM endpoint configured there is none, "
            "and it says so.",
        )
        profile = await call(client, "get_user_profile", {"user_id": "alice"})
        show(
            "alice's profile",
            {key: profile[key] for key in ("user", "facts")},
            "Structured memory holds only what was learned: here the facts and the work summary the demo passed "
            "along with add_memory, as a host model does when the server has no LLM. The other sections stay "
            "empty until something fills them. Set OPENAI_BASE_URL (and OPENAI_API_KEY if needed) before make demo "
            "to watch the server extract them itself.",
        )

        probe = await call(client, "retrieve_memory", {"query": "billing PostgreSQL Mia Acme", "user_id": "bob"})
        show("bob searches for alice's words", brief_pages(probe["short_term_memory"] + probe["retrieved_pages"]))
    return probe


def check_isolation(probe: dict[str, Any]) -> None:
    """Everything bob got back, except the echo of his own query, must be free of alice's words."""
    returned = json.dumps({key: value for key, value in probe.items() if key != "query"}, ensure_ascii=False)
    leaked = [word for word in ("billing", "PostgreSQL", "Mia", "Acme") if word in returned]
    if leaked:
        raise SystemExit(f"isolation broken: bob's results mention {leaked}")
    print("\nIsolation holds: nothing of alice's memory reached bob.")


def _llm_environment() -> dict[str, str]:
    """Pass an LLM endpoint through when the person running the demo has one configured."""
    return {name: os.environ[name] for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL") if os.environ.get(name)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="keep the demo's memory here instead of a temp dir")
    args = parser.parse_args()
    if args.data_dir:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        check_isolation(anyio.run(run, args.data_dir.resolve()))
        return
    with tempfile.TemporaryDirectory(prefix="memory-mcp-demo-") as temp:
        check_isolation(anyio.run(run, Path(temp)))


if __name__ == "__main__":
    main()
