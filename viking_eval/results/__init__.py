"""The result model and the run folder (the only reader and writer of the files in it)."""
