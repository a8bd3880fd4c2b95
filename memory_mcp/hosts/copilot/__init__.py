"""GitHub Copilot CLI: its hooks read and answered, its session log read, and the install it shares with VS Code."""
