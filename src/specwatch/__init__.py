"""specwatch: keep LLM serving with speculative decoding fast.

The tester lives in this package; the reference server lives in ``specwatch.refserver`` and is
reached only through its command line, HTTP API, logs and ``/proc`` (never imported here).
"""

__version__ = "0.1.0"
