"""Time for retrieval: document timestamps parsed at store build, time expressions in queries.

Two halves, one concept ("turn text into instants and ranges"):

* **Document timestamps.** :class:`DocumentTimes` parses, once per store build, the first present
  field of :attr:`TimestampConfig.fields` (``metadata.timestamp``, LoCoMo's ``session_date_time``)
  into aware datetimes and keeps one float64 array of epoch seconds per store row (NaN = no usable
  time). Accepted values, and nothing else (values are counted, never guessed):

  - epoch numbers (int/float, or a numeric string), in seconds (``epoch_unit: s``) or
    milliseconds (``ms``); a value outside +-1e11 s (about year 5000) is refused, since it is
    most likely milliseconds read as seconds;
  - ISO 8601 (``2023-05-08``, ``2023-05-08T13:56:00Z``, ``...+02:00``; ``datetime.fromisoformat``);
  - LoCoMo session strings: ``"1:56 pm on 8 May, 2023"``.

  Naive values take ``default_timezone`` (UTC unless configured). The counts (parsed, missing,
  unparseable per field, a few examples) are kept in :attr:`DocumentTimes.report`, logged at
  build when something did not parse, and saved with the array (``.npy`` + JSON, no pickle).

* **Query time expressions.** :func:`extract_time_expressions` finds absolute dates ("8 May 2023",
  "May 8, 2023", "2023-05-08", "September 2023", "in 2022", "in August") and relative ones
  ("yesterday", "last week", "two months ago", "past 3 days", "last Friday") with a table of
  patterns (:data:`TIME_PATTERNS`). Each :class:`TimeExpression` is resolved into half-open
  ranges of epoch seconds against a :class:`TimeContext` (the reference time comes from retriever
  configuration or from the scope's latest document, never from query metadata).

Calendar rules for relative expressions (reference time ``r``, in its own time zone):
``yesterday``/``today`` are calendar days; ``N days|weeks|months|years ago`` is the calendar day /
Monday-to-Sunday week / month / year containing ``r`` minus N units; ``last week|month|year`` is
``1 ... ago``; ``this week|month|year`` contains ``r``; ``past|last N units`` is ``[r - N units, r]``;
``last <weekday>`` is the latest such day strictly before ``r``'s day. A month without a year
("in August") is that month in every year from the scope's earliest to its latest time.

Modules (import each name from the module that holds it; this package re-exports nothing):

* ``words.py`` — month, weekday and number words, calendar units;
* ``stamps.py`` — :func:`parse_timestamp` (one value: epoch, ISO 8601, LoCoMo) and
  :func:`parse_timezone`;
* ``document_times.py`` — :class:`TimestampConfig` (``store.timestamps``) and
  :class:`DocumentTimes` (the parsed array per store row, saved and loaded);
* ``ranges.py`` — :class:`TimeRange`, :class:`TimeContext`, the calendar rules that resolve an
  expression into ranges, and :func:`in_ranges`;
* ``expressions.py`` — :class:`TimeExpression`, :data:`TIME_PATTERNS`,
  :func:`extract_time_expressions` and :func:`resolve_all`.
"""
