"""What outlives a run: results files, baselines, history, atomic writes."""
