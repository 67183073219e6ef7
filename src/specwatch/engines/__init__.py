"""What an engine is, from outside: one module per kind of server under test, each answering the
:class:`~specwatch.engines.protocol.Engine` Protocol (``protocol``): ``sglang`` (0.5.16 to 0.5.23),
``reference`` (the reference server's outside), ``openai`` (OpenAI-compatible servers); ``registry``
(``engine_for(name)``), ``foreign`` (servers recognised on a host, not driven). Imports nothing else of
specwatch but ``specwatch.errors``.
"""

__all__ = [
    "foreign",
    "openai",
    "protocol",
    "reference",
    "registry",
    "sglang",
]
