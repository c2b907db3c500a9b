"""The pages people read: report.md and the printed summary (``markdown``), report.html and
sweep.html (``page``; its figures in ``plots``, CSS and small pieces in ``html_parts``),
sweep plots (``sweep_plots``). Renderers return text; ``run_folder.py``
writes it."""

from viking_eval.report.markdown import summary_table

__all__ = ["summary_table"]
