"""runs/ on disk: a run's record (records.py) and the store that keeps it, the settings a run
records, and the history read back from it (queries, replay, promote, compare data, plots, the
run's HTML page)."""
