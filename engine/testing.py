"""Scripted fakes for testing code that uses toolroute, offline and in virtual time.

::

    import trio.testing
    from toolroute import open_engine
    from toolroute.testing import ScriptedEmbedder, inline_cpu

    async def test_late_model_fails_open(autojump_clock: trio.testing.MockClock) -> None:
        embedder = ScriptedEmbedder(delay=5.0)            # every call takes 5 s of trio time
        async with open_engine(catalog, embedder=embedder, run_cpu=inline_cpu(embedder)) as engine:
            selection = await engine.select("weather in Oslo")
            assert selection.outcome is Outcome.DEGRADED  # past the 0.25 s embedding deadline

Each fake records what it was asked, so a test can assert on calls as well as results.
"""

from ._core.public import publish as _publish
from ._testing.fakes import Fault as Fault
from ._testing.fakes import ScriptedDecider as ScriptedDecider
from ._testing.fakes import ScriptedEmbedder as ScriptedEmbedder
from ._testing.fakes import ScriptedGenerator as ScriptedGenerator
from ._testing.fakes import inline_cpu as inline_cpu

__all__ = ["Fault", "ScriptedDecider", "ScriptedEmbedder", "ScriptedGenerator", "inline_cpu"]

_publish(__name__, globals())
