"""Django's SQLite backend, making the database's folder (QA_VAR_DIR) when it first opens the
database rather than at import: see base.py."""
