#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""jinja_reference.py - render chat templates exactly as Hugging Face transformers'
apply_chat_template does, for comparison with deras' template interpreter.

    python3 tests/ref/jinja_reference.py CASES.json OUT.json TEMPLATE...

CASES.json is {"cases": {name: context}} (tests/data/template/conversations.json); each
context is passed as the keyword arguments of Template.render, as transformers passes
messages, tools, documents, add_generation_prompt, the special tokens and any
chat_template_kwargs. OUT.json gets, per template file (by base name), either
{"compile_error": "..."} or {"cases": {name: {"text": "..."} | {"error": "..."}}}.

The environment is transformers' _compile_jinja_template (utils/chat_template_utils.py):
an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols
extension and the AssistantTracker's {% generation %} tag (which renders its body), a
tojson filter that is json.dumps with ensure_ascii=False and its indent / separators /
sort_keys arguments, and the globals raise_exception and strftime_now.

Unlike the other scripts here this one runs at test time (test_template_corpus), with
Debian's python3-jinja2 (tools/bootstrap installs it); it needs nothing else.
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} ... {% endgeneration %}: a call block whose body is
    rendered in place (the tracking of indices does not change the text)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_generation_support")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    env = make_env()
    out = {}
    for path in sys.argv[3:]:
        with open(path, encoding="utf-8", newline="") as f:
            source = f.read()
        name = os.path.basename(path)
        try:
            template = env.from_string(source)
        except Exception as e:  # what Jinja2 itself refuses at compile time
            out[name] = {"compile_error": f"{type(e).__name__}: {e}"}
            continue
        results = {}
        for case, context in cases.items():
            try:
                results[case] = {"text": template.render(**context)}
            except Exception as e:
                results[case] = {"error": f"{type(e).__name__}: {e}"}
        out[name] = {"cases": results}
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "templates": out}, f, ensure_ascii=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
