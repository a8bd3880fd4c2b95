"""MemoryService, the one API the tools, the command line, the hosts and the dashboard call, and its parts."""
