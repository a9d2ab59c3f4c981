#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_sampling_docs - the documents agree with the sampling table.

common/request/sampling.h declares every sampling parameter once; the code is derived from
it, the documents are written by hand. This test fails when a document disagrees with the
table (sampling_table_dump prints it):
  docs/protocol.md     the request table has a row per parameter with its type, its
                       default, its range first in the range column, and its error codes
                       (value_out_of_range; limit_exceeded for a cap); the worker link's
                       `submit` row names it (after "optional" when the link may omit it)
  tools/clients/python README.md names it among the request fields; the client's
                       parameter lists (client.py) type it as the table does

    test_sampling_docs.py DUMP_EXE SOURCE_DIR
"""
import ast
import os
import re
import subprocess
import sys


def table(dump):
    rows = []
    for line in subprocess.run([dump], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        key, kind, default, rng, flag, arg, cap, wopt, doc = line.split("\t")
        rows.append(dict(key=key, kind=kind, default=default, range=rng, flag=flag,
                         cap=cap == "1", worker_optional=wopt == "1", doc=doc))
    return rows


def request_rows(protocol_md):
    """The client request table of docs/protocol.md: key -> its cells."""
    text = open(protocol_md, encoding="utf-8").read()
    start = text.index("### `request`")
    end = text.index("### `cancel`", start)
    rows = {}
    for line in text[start:end].splitlines():
        m = re.match(r"\|\s*`(\w+)`\s*\|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows, text


def python_params(client_py):
    """INT_PARAMS, FLOAT_PARAMS, ... of the Python client, as sets."""
    tree = ast.parse(open(client_py, encoding="utf-8").read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and node.targets[0].id.endswith("_PARAMS"):
            try:
                out[node.targets[0].id] = set(ast.literal_eval(node.value))
            except ValueError:
                pass  # PARAMS = INT_PARAMS + ...: derived
    return out


def main():
    dump, src = sys.argv[1], sys.argv[2]
    rows = table(dump)
    bad = []
    doc_rows, protocol = request_rows(os.path.join(src, "docs", "protocol.md"))
    submit = re.search(r"^\| `submit` \|.*$", protocol, re.M).group(0)
    readme = open(os.path.join(src, "tools", "clients", "python", "README.md"),
                  encoding="utf-8").read()
    py = python_params(os.path.join(src, "tools", "clients", "python", "deras_client",
                                    "client.py"))
    py_kind = {"float": "FLOAT_PARAMS", "int": "INT_PARAMS",
               "map of int to float": "MAP_PARAMS"}
    for r in rows:
        k = r["key"]
        cells = doc_rows.get(k)
        if not cells:
            bad.append(f"docs/protocol.md: no row for `{k}` in the request table")
        else:
            typ, default, rng, errors = cells[0], cells[1], cells[2], cells[3]
            if typ != r["kind"]:
                bad.append(f"docs/protocol.md `{k}`: type '{typ}', the table says {r['kind']}")
            if not re.match(re.escape(r["default"]) + r"($| )", default):
                bad.append(f"docs/protocol.md `{k}`: default '{default}', the table says "
                           f"{r['default']}")
            if not rng.startswith(r["range"]):
                bad.append(f"docs/protocol.md `{k}`: range '{rng}' does not start with the "
                           f"table's {r['range']}")
            want = ["value_out_of_range"] + (["limit_exceeded"] if r["cap"] else [])
            for code in want:
                if f"`{code}`" not in errors:
                    bad.append(f"docs/protocol.md `{k}`: errors '{errors}' lack `{code}`")
            if not r["cap"] and "`limit_exceeded`" in errors:
                bad.append(f"docs/protocol.md `{k}`: limit_exceeded listed, the table has no cap")
        at = submit.find(f"`{k}`")
        if at < 0:
            bad.append(f"docs/protocol.md: the worker link's submit row lacks `{k}`")
        elif r["worker_optional"] != (submit.rfind("optional", 0, at) >= 0):
            bad.append(f"docs/protocol.md: submit row: `{k}` must be listed "
                       f"{'after' if r['worker_optional'] else 'before'} 'optional'")
        if f"`{k}`" not in readme:
            bad.append(f"tools/clients/python/README.md does not name `{k}`")
        group = py_kind[r["kind"]]
        if k not in py.get(group, set()):
            bad.append(f"tools/clients/python/deras_client/client.py: {k} is not in {group}")
    for b in bad:
        print(b)
    print(f"test_sampling_docs: {len(rows)} parameters, {len(bad)} disagreements")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
