"""Comparing revisions of the server under test: A/B rounds, git bisect and patch bisection."""
