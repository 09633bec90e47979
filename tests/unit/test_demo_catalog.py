"""``Catalog.demo()``: the bundled catalogue, reachable without a tool file of one's own."""

from __future__ import annotations

from importlib import resources

from toolroute import Catalog


def test_demo_catalog_is_the_bundled_file_read_as_mcp_servers() -> None:
    bundled = resources.files("toolroute") / "data" / "demo_catalog.json"
    with resources.as_file(bundled) as path:
        assert Catalog.demo() == Catalog.from_file(path)


def test_demo_catalog_holds_50_tools_on_8_servers_with_qualified_clashes() -> None:
    catalog = Catalog.demo()
    assert len(catalog) == 50
    assert [server.id for server in catalog.servers] == [
        "github", "slack", "gmail", "calendar", "filesystem", "postgres", "web", "weather",
    ]  # fmt: skip
    assert sum(len(server.tool_ids) for server in catalog.servers) == 50
    # "search" is a tool of two servers, so both get a qualified id.
    assert "search" not in catalog
    assert catalog["gmail__search"].server == "gmail"
    assert catalog["web__search"].server == "web"
    assert catalog["get_forecast"].server == "weather"


def test_each_demo_call_reads_an_equal_catalog() -> None:
    first, second = Catalog.demo(), Catalog.demo()
    assert first == second
    assert first is not second
