"""The Model Context Protocol edge: which tools there are, their signatures and text, stdio and HTTP."""
