"""Run outputs: machine-readable files (``files``) and the pages people read (``markdown``)."""

from viking_eval.report.files import write_outputs
from viking_eval.report.markdown import summary_table

__all__ = ["summary_table", "write_outputs"]
