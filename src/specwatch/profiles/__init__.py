"""Server profiles (TOML): what to boot and how (``profile``), the schema (``tables``, ``schema``) and
``loading`` (validation, defaults, roles). Imports nothing else of specwatch but ``specwatch.errors``.
"""

__all__ = [
    "loading",
    "profile",
    "schema",
    "tables",
]
