"""The rules every change to memory obeys, whoever makes it: facts, proposals, progress, sessions, signals, redaction. No I/O."""
