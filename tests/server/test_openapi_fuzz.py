"""Schemathesis over every operation of the real REST server (uvicorn on loopback, a user key):
every default check (no 5xx, statuses, content types, headers and bodies as the OpenAPI document
declares them, schema-valid data accepted, schema-violating data refused, Allow headers...) over a
bounded number of generated requests, with zero failures; once with a user key, once on a server
without keys (``serve --no-auth``, ``dialogmem ui``), whose guard against web pages of other sites
(``_server/_origin.py``) must not turn a request the document allows into a failure.

One allowance: a schema-valid request may still get 422 where the document cannot state the rule
(a free-text time the parser cannot read, the shape of a LoCoMo conversation, ids in NFC form...);
422 is what such input is documented to get. Every other check runs with its defaults.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dialogmem import ScriptedLLM
from serverkit import rest_server

CONFIG = """\
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "401", "403", "404", "409", "422", "429"]
"""


def schemathesis_cli() -> list[str]:
    found = shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("st")
    if found is None:
        pytest.fail("schemathesis is not installed: pip install -e '.[dev]'", pytrace=False)
    return [found]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("auth", [True, False], ids=["user key", "keyless"])
def test_every_operation_passes_every_check(tmp_path: Path, auth: bool) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    # a scripted fake, not a model: the same text for every stage (deep rounds that expect JSON get
    # unusable output, which the API documents as 502)
    llm = ScriptedLLM(lambda stage, messages: "scripted answer [1]")
    with rest_server(tmp_path / "store", ["alice"], llm=llm, auth=auth) as (url, keys, _):
        who = ["-H", f"Authorization: Bearer {keys['alice']}"] if auth else []
        run = subprocess.run(
            [*schemathesis_cli(), "--config-file", str(config), "run", f"{url}/openapi.json",
             *who, "--max-examples", os.environ.get("FUZZ_EXAMPLES", "10"),
             "--seed", "1",
             "--workers", "1", "--request-timeout", "60", "--no-color"],
            capture_output=True, text=True, timeout=280, check=False)
    out = run.stdout
    summary = out[out.find("SUMMARY"):] if "SUMMARY" in out else out[-4000:]
    print(summary)  # operations, test cases, failures: shown with pytest -s
    assert run.returncode == 0, out[out.find("FAILURES"):][:12000] + run.stderr[-2000:]
    tested = re.search(r"Tested: (\d+)", summary)
    assert tested is not None and int(tested.group(1)) >= 16, summary
    assert "failure" not in summary.lower().replace("0 failures", ""), summary
