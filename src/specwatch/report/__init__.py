"""What a person reads: the summary table, Markdown, JUnit properties, pytest-benchmark JSON, the HTML site."""

__all__ = [
    "html",
    "table",
]
