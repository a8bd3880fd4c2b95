"""Entry point for hosts that run a file: `python server.py --config config.json`."""

from memory_mcp.cli.entry import main

if __name__ == "__main__":
    raise SystemExit(main())
