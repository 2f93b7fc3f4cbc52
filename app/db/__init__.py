"""Storage: SQLAlchemy 2 models, engine/session setup and query functions."""
