"""The advisor behind ``servelab select``: candidate configurations, search, decision matrix, report.

It sees the server only through its public client side (``servelab.bench``) and the files it serves
(``servelab.convert``, ``servelab.repository``); the import-linter contract keeps it off the core.
"""
