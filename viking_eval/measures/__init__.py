"""What is measured over a run: ir-measures metrics and paired significance tests."""
