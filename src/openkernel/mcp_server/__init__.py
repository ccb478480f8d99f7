"""``openkernel mcp``: openkernel as tools for coding agents, over the Model Context Protocol.

``location`` says where the results database is (``--db``, ``OPENKERNEL_DB``, the user's data
directory); ``answers`` holds the typed records the tools return; ``jobs`` runs searches and
suites in background threads and judges kernels (candidate code runs only in the confined
worker processes of the evaluation pipeline, never in the server); ``server`` declares the
tools and resources on the official SDK (``mcp``, imported only here).
"""
