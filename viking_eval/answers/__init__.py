"""Answer-level evaluation (docs/answers.md): does the retrieved context hold the gold answer
(answer recall@k and answer-token recall@k, no model needed), and, with an OpenAI-compatible
LLM, a reader that answers from the context and a judge that grades the answer against the gold
one (the J score, token F1). Answers come from query metadata and never reach a retriever.

Modules: ``settings.py`` (``answers.*`` and ``llm.*``), ``text.py`` (SQuAD-style normalisation,
matching, F1), ``prompts.py`` (prompt files), ``cache.py`` (answers and verdicts by content key),
``chat.py`` (the calls: usage, retries, concurrency), ``evaluate.py`` (per query and per
category, with intervals), ``names.py`` (the metric names the outputs show).
"""
