"""Evaluating a selection against labelled requests: the helpers ``toolroute eval`` uses.

::

    from toolroute import Catalog, ToolIndex
    from toolroute.evaluate import evaluate, load_queries

    queries = load_queries("queries.json")
    rankings = [index.select(q.text, max_tools=5).tool_ids for q in queries]
    print(evaluate(queries, rankings)["hit@5"])

``split_of`` fixes each request's dev/test split by its text's hash, so defaults are chosen on
``dev`` and figures reported on ``test``. ``tokenize`` is the tokeniser keyword recall and dedup
share; ``routing_query`` is the request text a routing call reads from a conversation.
"""

from ._core.evaluate import Query as Query
from ._core.evaluate import evaluate as evaluate
from ._core.evaluate import load_queries as load_queries
from ._core.evaluate import split_of as split_of
from ._core.public import publish as _publish
from ._core.text import tokenize as tokenize
from ._routing.pipeline import routing_query as routing_query

__all__ = ["Query", "evaluate", "load_queries", "routing_query", "split_of", "tokenize"]

_publish(__name__, globals())
