"""Alembic migrations of the results database (``openkernel.store.migrate`` runs them)."""
