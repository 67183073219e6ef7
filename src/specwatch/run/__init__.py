"""The pytest face: plugin hooks, options, fixtures, the session, gates and the run's summary."""
