"""Sample data shipped with sparktrain and the generators that make it (``python -m datasets --help``)."""
