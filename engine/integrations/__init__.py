"""Adapters that put toolroute where agents already run: one module per framework or protocol.

Each adapter is an optional extra (``pip install 'toolroute[langchain]'`` …) pinned to one major
version of its framework, and is imported only by name (``toolroute.integrations.langchain``):
importing this package imports no framework.
"""
