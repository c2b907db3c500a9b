"""Quality as the memory grows (``growth.by``, docs/growth.md): the schedule of steps, ingest
(a full rebuild today), one step's evaluation and record, the program, its report."""
