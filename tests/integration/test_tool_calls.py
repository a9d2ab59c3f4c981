# SPDX-License-Identifier: Apache-2.0
"""test_tool_calls.py - OpenAI tool calling end to end through the official `openai` package.

`deras serve` on the test model with a vendor chat template that knows tools, used in place
from ../shared/chat-templates (never copied into the project): Qwen 2.5's (Hermes style,
<tool_call>{"name", "arguments"}</tool_call>), and in a second class Llama 3.1's (JSON
{"name", "parameters"}). The tools' definitions are rendered by the template; then:

  - tool_choice "required" and a named function, streaming and not: the reply's tool_calls
    parse, name functions of the request (the named one), and their arguments are JSON that
    validates against the function's parameters schema (Python jsonschema); finish_reason
    "tool_calls", content null;
  - "auto": plain text stays content; a reply that does hold a call (made to, here, by a
    guided_grammar beside the tools) is parsed into tool_calls, streamed too;
  - the conversation goes on: the assistant's tool_calls and the tool's result rendered back
    through the template, answered;
  - tool_choice "none" parses nothing; a function whose parameters do not compile is a 400
    invalid_grammar naming it.

Exit 77 (skipped) without ../shared/chat-templates, the openai package (.dev/pylib),
python3-jsonschema, pyzmq/msgpack or the test model.

    DERAS_BUILD_DIR=build DERAS_TEST_MODEL=model.gguf python3 tests/integration/test_tool_calls.py
"""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cluster import ROOT, Serve  # noqa: E402

TEMPLATES = os.path.join(os.path.dirname(ROOT), "shared", "chat-templates")
QWEN = os.path.join(TEMPLATES, "Qwen-Qwen2.5-7B-Instruct.jinja")
LLAMA = os.path.join(TEMPLATES, "meta-llama-Llama-3.1-8B-Instruct.jinja")
sys.path.append(os.environ.get("DERAS_PYLIB", os.path.join(ROOT, ".dev", "pylib")))
MODEL = os.environ.get("DERAS_TEST_MODEL", "")
try:
    import jsonschema
    import openai
except ImportError as e:
    print("SKIPPED: %s (tools/bootstrap test installs openai and python3-jsonschema)" % e)
    sys.exit(77)
if not (os.path.exists(QWEN) and os.path.exists(LLAMA)):
    print("SKIPPED: the vendor chat templates are not at %s (a checkout without ../shared)" %
          TEMPLATES)
    sys.exit(77)
if not os.path.exists(MODEL):
    if os.environ.get("DERAS_REQUIRE_MODEL") == "1":
        print("FAILED: test model not found at %r" % MODEL)
        sys.exit(1)
    print("SKIPPED: test model not found (DERAS_TEST_MODEL=%r)" % MODEL)
    sys.exit(77)

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 40},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}
TIME = {"type": "object", "properties": {"timezone": {"type": "string", "pattern":
        "^[A-Z][a-z]+/[A-Z][a-z_]+$"}}, "required": ["timezone"]}
BOOK = {"type": "object", "properties": {
    "restaurant": {"type": "string", "maxLength": 40},
    "people": {"type": "integer", "minimum": 1, "maximum": 12},
    "date": {"type": "string", "format": "date"}}, "required": ["restaurant", "people", "date"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description":
     "Get the current weather in a city", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description":
     "Get the local time in a time zone", "parameters": TIME}},
    {"type": "function", "function": {"name": "book_table", "description":
     "Book a table at a restaurant", "parameters": BOOK}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "system", "content": "You are a helpful assistant."},
       {"role": "user", "content": "What's the weather like in Paris today?"}]


def check_args(test, name, arguments):
    """arguments is JSON text that validates against the named function's parameters."""
    test.assertIn(name, SCHEMAS)
    args = json.loads(arguments)
    cls = jsonschema.validators.validator_for(SCHEMAS[name])
    cls(SCHEMAS[name], format_checker=cls.FORMAT_CHECKER).validate(args)
    return args


def streamed(stream):
    """(content, [(name, arguments)], finish_reason) accumulated from a chat stream's deltas,
    tool calls merged by index as OpenAI's clients merge them."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        d = ch.delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            c["id"] = tc.id or c["id"]
            if tc.function:
                c["name"] += tc.function.name or ""
                c["arguments"] += tc.function.arguments or ""
        finish = ch.finish_reason or finish
    for c in calls.values():
        assert c["id"] and c["id"].startswith("call_"), c
    return content, [(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)], finish


class Base(unittest.TestCase):
    template = None

    @classmethod
    def setUpClass(cls):
        cls.s = Serve(MODEL, ("--kv-cache-memory", "256MiB", "--chat-template", cls.template),
                      timeout=300)
        cls.api = openai.OpenAI(base_url=cls.s.url + "/v1", api_key="none", timeout=1200)
        cls.model = cls.api.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        code = cls.s.stop()
        assert code == 0, "deras serve exited with %d" % code

    def create(self, **kw):
        args = dict(model=self.model, messages=ASK, tools=TOOLS, max_tokens=160,
                    temperature=0)
        args.update(kw)
        return self.api.chat.completions.create(**args)

    def calls_of(self, tool_choice, **kw):
        """Non-streamed and streamed replies under tool_choice: both all calls, checked."""
        r = self.create(tool_choice=tool_choice, **kw)
        m = r.choices[0].message
        self.assertEqual(r.choices[0].finish_reason, "tool_calls", m)
        self.assertIsNone(m.content)
        self.assertTrue(m.tool_calls)
        whole = []
        for tc in m.tool_calls:
            self.assertEqual(tc.type, "function")
            self.assertTrue(tc.id.startswith("call_"))
            check_args(self, tc.function.name, tc.function.arguments)
            whole.append((tc.function.name, tc.function.arguments))
        content, calls, finish = streamed(self.create(tool_choice=tool_choice, stream=True, **kw))
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(content, "")
        if kw.get("temperature", 0) == 0:
            self.assertEqual(calls, whole, "streamed as whole")
        for name, arguments in calls:
            check_args(self, name, arguments)
        return whole


class Hermes(Base):
    """Qwen 2.5's template: <tool_call> JSON, parallel calls."""
    template = QWEN

    def test_required(self):
        calls = self.calls_of("required")
        print("  required: %s" % calls)
        for seed in (1, 2):
            calls = self.calls_of("required", temperature=0.9, seed=seed)
            print("  required, seed %d: %s" % (seed, calls))

    def test_named(self):
        for name in ("get_time", "book_table"):
            calls = self.calls_of({"type": "function", "function": {"name": name}})
            self.assertEqual([n for n, _ in calls], [name])
            print("  %s: %s" % (name, calls[0][1]))
        calls = self.calls_of({"type": "function", "function": {"name": "get_weather"}},
                              temperature=1.0, seed=7, n=1)
        self.assertEqual(calls[0][0], "get_weather")

    def test_auto(self):
        # whatever the model says: content or calls, never both lost
        r = self.create(tool_choice="auto")
        m = r.choices[0].message
        self.assertTrue(m.content or m.tool_calls)
        for tc in m.tool_calls or []:
            json.loads(tc.function.arguments)
        # a reply that holds a call (a grammar makes the model write one) is parsed
        g = ('root ::= "I will check.\\n<tool_call>\\n{\\"name\\": \\"get_weather\\", '
             '\\"arguments\\": {\\"city\\": \\"" [A-Z] [a-z]{2,9} "\\"}}\\n</tool_call>"')
        r = self.create(tool_choice="auto", extra_body={"guided_grammar": g})
        m = r.choices[0].message
        self.assertEqual(r.choices[0].finish_reason, "tool_calls")
        self.assertEqual(m.content, "I will check.\n")
        self.assertEqual(m.tool_calls[0].function.name, "get_weather")
        check_args(self, "get_weather", m.tool_calls[0].function.arguments)
        content, calls, finish = streamed(self.create(tool_choice="auto", stream=True,
                                                      extra_body={"guided_grammar": g}))
        self.assertEqual((content, finish), ("I will check.\n", "tool_calls"))
        self.assertEqual(calls, [(m.tool_calls[0].function.name,
                                  m.tool_calls[0].function.arguments)])
        # tool_choice none: the same text is only text
        r = self.create(tool_choice="none", extra_body={"guided_grammar": g})
        self.assertIn("<tool_call>", r.choices[0].message.content)
        self.assertFalse(r.choices[0].message.tool_calls)

    def test_conversation_goes_on(self):
        r = self.create(tool_choice={"type": "function", "function": {"name": "get_weather"}})
        tc = r.choices[0].message.tool_calls[0]
        msgs = ASK + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": tc.id, "type": "function", "function": {
                    "name": tc.function.name, "arguments": tc.function.arguments}}]},
            {"role": "tool", "tool_call_id": tc.id, "content": '{"temperature_c": 18}'}]
        r = self.create(messages=msgs, tool_choice="none", max_tokens=40)
        self.assertTrue(r.choices[0].message.content)

    def test_bad_parameters_refused(self):
        bad = [{"type": "function", "function": {"name": "odd", "parameters": {
            "type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}}}]
        with self.assertRaises(openai.BadRequestError) as e:
            self.create(tools=bad, tool_choice="required")
        self.assertEqual(e.exception.body["code"], "invalid_grammar")
        self.assertIn("odd", e.exception.body["message"])
        with self.assertRaises(openai.BadRequestError):
            self.create(tool_choice={"type": "function", "function": {"name": "absent"}})


class Llama3Json(Base):
    """Llama 3.1's template: {"name", "parameters"} as the whole reply."""
    template = LLAMA

    def test_required_and_named(self):
        calls = self.calls_of("required")
        self.assertEqual(len(calls), 1)
        print("  required: %s" % calls)
        calls = self.calls_of({"type": "function", "function": {"name": "get_time"}})
        self.assertEqual(calls[0][0], "get_time")


if __name__ == "__main__":
    unittest.main(verbosity=2)
