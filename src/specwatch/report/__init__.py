"""What a person reads: the summary table, Markdown, JUnit properties, pytest-benchmark JSON, the HTML site, the
history's plots."""

__all__ = [
    "html",
    "plot",
    "sidebyside",
    "table",
]
