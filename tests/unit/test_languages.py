"""The keyword figures of the other-languages table in docs/catalogues-and-selection.md, read
from its set (tests/fixtures/languages), so the page stays true: the same 10 tools in seven
languages, one request per tool in each."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolroute import Catalog, ToolIndex
from toolroute.evaluate import load_queries

LANGUAGES = Path(__file__).parent.parent / "fixtures" / "languages"


def keyword_hit1(tools: str, requests: str) -> float:
    index = ToolIndex(Catalog.from_file(LANGUAGES / f"tools.{tools}.json"), embedder=None)
    queries = load_queries(LANGUAGES / f"queries.{requests}.json")
    hits = sum(index.search(q.text, 1).tool_ids == q.expected for q in queries)
    return hits / len(queries)


# (catalogue, requests): keyword hit@1, as the table gives them
FIGURES = {
    ("en", "en"): 0.2,
    **{("en", lang): hit for lang, hit in {"de": 0.0, "fr": 0.1, "es": 0.0}.items()},
    **{("en", lang): 0.0 for lang in ("zh", "ja", "ar")},
    **{(lang, lang): hit for lang, hit in {"zh": 0.5, "ja": 0.5, "ar": 0.1}.items()},
    **{(lang, lang): hit for lang, hit in {"de": 0.1, "fr": 0.4, "es": 0.2}.items()},
    **{(lang, "en"): 0.1 for lang in ("zh", "ja", "de", "fr", "es", "ar")},
}


@pytest.mark.parametrize(("tools", "requests"), list(FIGURES))
def test_the_documented_keyword_figures(tools: str, requests: str) -> None:
    assert keyword_hit1(tools, requests) == pytest.approx(FIGURES[tools, requests])
