"""runs/ on disk: the run store, the settings a run records, and the history
read back from it (queries, replay, promote, compare data, plots)."""
