#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_json_schema_validate - every random sentence of each schema's grammar validates.

Runs `test_json_schema samples N` (random sentences of the grammar compiled from each
schema in tests/data/grammar/schemas.json, as JSON lines) and checks each with Python's
jsonschema (Draft 2020-12 with format checking), so the schema compiler never admits an
instance the schema refuses. The instances the corpus lists are checked by the C test.

    test_json_schema_validate.py TEST_JSON_SCHEMA_BINARY
"""
import json
import os
import subprocess
import sys

try:
    import jsonschema
except ImportError:
    print("SKIPPED: the jsonschema module is not installed (tools/bootstrap test installs it)")
    sys.exit(77)


def main():
    exe = sys.argv[1]
    data = os.environ["DERAS_TEST_DATA"]
    with open(os.path.join(data, "grammar", "schemas.json"), encoding="utf-8") as f:
        schemas = {c["name"]: c["schema"] for c in json.load(f)}
    out = subprocess.run([exe, "samples", "40"], check=True, capture_output=True, text=True).stdout
    n = bad = 0
    for line in out.splitlines():
        rec = json.loads(line)
        v = jsonschema.Draft202012Validator(schemas[rec["name"]],
                                            format_checker=jsonschema.FormatChecker())
        inst = json.loads(rec["sample"])
        errs = list(v.iter_errors(inst))
        n += 1
        if errs:
            bad += 1
            print(f"{rec['name']}: {rec['sample']!r}: {errs[0].message}")
    print(f"{n} samples from {len(schemas)} schemas, {bad} invalid")
    if n < 10 * len(schemas):
        print("too few samples")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
