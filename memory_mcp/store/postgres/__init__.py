"""The PostgreSQL backend, its schema and migrations."""
