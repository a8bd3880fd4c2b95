#!/bin/sh
# memory-mcp's hooks in the Claude Code plugin. Claude Code puts each plugin option that is set in a
# hook's environment (CLAUDE_PLUGIN_OPTION_<KEY>); they are given to memory-mcp as the variables it
# reads, so a value never appears on a command line, and an option left empty leaves the default.
# $1: the hook (session-start, prompt or stop).
if [ -n "$CLAUDE_PLUGIN_OPTION_MEMORY_FOLDER" ]; then export MEMORY_MCP_HOME="$CLAUDE_PLUGIN_OPTION_MEMORY_FOLDER"; fi
if [ -n "$CLAUDE_PLUGIN_OPTION_LLM_BASE_URL" ]; then export OPENAI_BASE_URL="$CLAUDE_PLUGIN_OPTION_LLM_BASE_URL"; fi
if [ -n "$CLAUDE_PLUGIN_OPTION_LLM_MODEL" ]; then export MEMORY_MCP_LLM_MODEL="$CLAUDE_PLUGIN_OPTION_LLM_MODEL"; fi
if [ -n "$CLAUDE_PLUGIN_OPTION_LLM_API_KEY" ]; then export OPENAI_API_KEY="$CLAUDE_PLUGIN_OPTION_LLM_API_KEY"; fi
if [ -n "$CLAUDE_PLUGIN_OPTION_MEMORY_SERVER_URL" ]; then export MEMORY_MCP_SERVER_URL="$CLAUDE_PLUGIN_OPTION_MEMORY_SERVER_URL"; fi
if [ -n "$CLAUDE_PLUGIN_OPTION_MEMORY_SERVER_TOKEN" ]; then export MEMORY_MCP_SERVER_TOKEN="$CLAUDE_PLUGIN_OPTION_MEMORY_SERVER_TOKEN"; fi
exec uvx --from "$CLAUDE_PLUGIN_ROOT" --with-editable "$CLAUDE_PLUGIN_ROOT" memory-mcp hook "$1" --host claude-code
