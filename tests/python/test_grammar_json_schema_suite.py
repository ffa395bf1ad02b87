"""JSON-Schema-Test-Suite (draft 2020-12) against our JSON Schema grammars.

For every test group whose schema compiles (schemas using unsupported keywords must be rejected at
compile time and are counted, not run), each valid instance must have a serialisation our matcher
accepts and no serialisation of an invalid instance may be accepted. Serialisation follows our
output policy (json_schema.h): compact, integral floats as integers, members in any order we can
produce (all orders are tried, so the check does not depend on which order the grammar fixes).
`format` is asserted by our grammars (like llguidance and XGrammar), so format.json's
"invalid ... string is only an annotation by default" cases are expected to be rejected.
"""
import json

import pytest

from test_grammar_util import FIXTURES, Driver, encodable, serialisations

SUITE = FIXTURES / "json-schema-test-suite" / "tests" / "draft2020-12"
FILES = sorted(p.name for p in SUITE.glob("*.json"))


@pytest.fixture(scope="module")
def driver():
    d = Driver()
    yield d
    d.close()


def run_file(driver, name):
    groups = json.loads((SUITE / name).read_text())
    stats = {"groups": 0, "compiled": 0, "unsupported": 0, "cases": 0, "failures": []}
    for group in groups:
        stats["groups"] += 1
        schema_text = json.dumps(group["schema"], ensure_ascii=False)
        r = driver.compile("json_schema", schema_text)
        if not r["ok"]:
            assert r["error_kind"] == "unsupported", (group["description"], r)
            stats["unsupported"] += 1
            continue
        stats["compiled"] += 1
        for case in group["tests"]:
            cands = serialisations(case["data"])
            if not all(encodable(c) for c in cands):
                continue
            stats["cases"] += 1
            valid = case["valid"]
            if name == "format.json" and "only an annotation by default" in case["description"]:
                valid = False  # we assert formats (json_schema.h): these strings are not in them
            results = driver.match(r["id"], cands)
            ok = any(results) if valid else not any(results)
            if not ok:
                stats["failures"].append(f'{group["description"]} / {case["description"]}: '
                                         f'valid={case["valid"]} tried={cands[:3]}')
        driver.free(r["id"])
    return stats


@pytest.mark.parametrize("name", FILES)
def test_suite_file(driver, name):
    stats = run_file(driver, name)
    print(f"{name}: {stats['compiled']}/{stats['groups']} groups compiled, "
          f"{stats['unsupported']} unsupported, {stats['cases']} cases, {len(stats['failures'])} failures")
    assert not stats["failures"], "\n".join(stats["failures"])
