"""The project's own tests: the embedded stack (core/stack), settings, the wheel, migrations,
the exception tree, the README's example and the docs' links."""
