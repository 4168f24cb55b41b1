"""docs/api.md is the API reference written from the ops' declarations."""

import pathlib

from fp4q.ops.api import OPS
from fp4q.ops.entry import api_table

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "api.md"


def test_docs_api_md_is_written_from_the_declarations():
    assert DOC.read_text() == api_table(OPS), (
        "docs/api.md is stale: python -c 'from fp4q.ops.api import OPS; from fp4q.ops.entry import api_table; "
        "open(\"docs/api.md\", \"w\").write(api_table(OPS))'")


def test_every_public_function_is_its_declarations():
    import fp4q

    for op in OPS:
        fn = getattr(fp4q, op.name)
        assert fn.__doc__.startswith(op.summary) and f"def {op.name}(" in fn.__source__
