"""VS Code's agent hooks read and answered (installed with Copilot CLI's file, which VS Code reads too)."""
