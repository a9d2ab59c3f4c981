# SPDX-License-Identifier: Apache-2.0
"""test_structured_output.py - structured output end to end on the test model (issue 17).

One `deras serve` on $DERAS_TEST_MODEL (SmolLM2-135M-Instruct) with n-gram speculation
available to requests, driven through the msgpack protocol (the Python client) and the
OpenAI-compatible HTTP API:

  Corpus    tests/data/structured/schemas.json: realistic JSON Schemas and simple ones in
            the spirit of the JSON Schema test suite (types, enum, const, required, nested
            objects, arrays with min/maxItems, prefixItems, anyOf/oneOf, $ref/$defs,
            patterns, formats, integer bounds), each asked greedily and seeded at
            temperatures 0.8 and 1.0, all in flight at once: 100% of the outputs must parse
            and validate with Python's jsonschema (formats checked), finish_reason "stop".
  Regex, GBNF  outputs fully match their regular expressions (Python's re), GBNF grammars
            checked by a recognizer written here (a recursive one included).
  Batching  constrained requests (schema, regex, grammar, JSON mode) among free ones, n = 2
            seeded: each constrained output is token for token what the same request gives
            alone (greedy; a divergence after a near tie of the two best logprobs, 1e-3, is
            tolerated and printed), seeded samples the same batched and alone; with
            speculation (n-gram drafts) on vs off, identical.
  OpenAI    response_format json_schema / json_object and guided_regex over raw HTTP.
  Hostile   a schema with an unsupported keyword (named), JSON that is not a schema, an
            undefined rule, a grammar over the size limit, nesting and repetition past the
            compiler's limits, a huge alternation, catastrophic regexes (compiled and run:
            no backtracking), a run-time budget forced by a logit bias: each gets its code
            (invalid_grammar, grammar_budget_exceeded), and the router and worker serve on.

Needs python3-zmq, python3-msgpack, python3-jsonschema and the test model (exit 77
without them; a missing model fails under DERAS_REQUIRE_MODEL=1).

    DERAS_BUILD_DIR=build DERAS_TEST_MODEL=model.gguf python3 tests/integration/test_structured_output.py
"""

import json
import os
import re
import sys
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cluster import ROOT, DerasError, Serve  # noqa: E402
from deras_client import Client  # noqa: E402

try:
    import jsonschema
except ImportError:
    print("SKIPPED: python3-jsonschema is missing (tools/bootstrap test installs it)")
    sys.exit(77)
MODEL = os.environ.get("DERAS_TEST_MODEL", "")
if not os.path.exists(MODEL):
    if os.environ.get("DERAS_REQUIRE_MODEL") == "1":
        print("FAILED: test model not found at %r" % MODEL)
        sys.exit(1)
    print("SKIPPED: test model not found (DERAS_TEST_MODEL=%r)" % MODEL)
    sys.exit(77)

CORPUS = os.path.join(ROOT, "tests", "data", "structured", "schemas.json")
NEAR_TIE = 1e-3


def validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def margin_at(choice, k):
    """Top-1 minus top-2 logprob at token k of a choice asked with logprobs=2."""
    top = choice.logprobs[k]["top"]
    return top[0][1] - top[1][1] if len(top) >= 2 else float("inf")


def same_tokens(test, alone, got, what):
    """got's token ids equal alone's, or part only after a near tie of alone's."""
    a, b = alone.token_ids, got.token_ids
    k = 0
    while k < len(a) and k < len(b) and a[k] == b[k]:
        k += 1
    if k == len(a) == len(b):
        return
    if k < len(a) and k < len(b) and margin_at(alone, k) < NEAR_TIE:
        print("  %s: diverges at token %d after a near tie" % (what, k))
        return
    test.fail("%s: token %d differs (%d vs %d tokens): %r vs alone %r" %
              (what, k, len(b), len(a), got.text, alone.text))


# GBNF grammars and a Python check of each sentence (re for the regular ones, a parser for
# the recursive one).
def balanced_expr(s):
    """expr := term (("+"|"-") term)*; term := num | "(" expr ")"."""
    pos = 0

    def term():
        nonlocal pos
        if pos < len(s) and s[pos] == "(":
            pos += 1
            expr()
            if pos >= len(s) or s[pos] != ")":
                raise ValueError
            pos += 1
            return
        m = re.match(r"[0-9]{1,3}", s[pos:])
        if not m:
            raise ValueError
        pos += m.end()

    def expr():
        nonlocal pos
        term()
        while pos < len(s) and s[pos] in "+-":
            pos += 1
            term()

    try:
        expr()
        return pos == len(s)
    except ValueError:
        return False


GRAMMARS = [
    ("The answer, yes or no: ", 'root ::= ("yes" | "no") "."', lambda s: s in ("yes.", "no.")),
    ("Three key=value settings:\n",
     'root ::= line line line\nline ::= [a-z]{1,8} "=" [0-9]{1,4} "\\n"',
     lambda s: re.fullmatch(r"([a-z]{1,8}=[0-9]{1,4}\n){3}", s) is not None),
    ("An arithmetic expression: ",
     'root ::= expr\nexpr ::= term (("+" | "-") term){0,6}\nterm ::= [0-9]{1,3} | "(" expr ")"',
     balanced_expr),
    ("A greeting in French: ", 'root ::= "Bonjour" (", " [A-Z] [a-zé]{1,10})? "!"',
     lambda s: re.fullmatch(r"Bonjour(, [A-Z][a-zé]{1,10})?!", s) is not None),
]

REGEXES = [
    ("My phone number is ", r"\(\d{3}\) \d{3}-\d{4}"),
    ("Today's date: ", r"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    ("An IPv4 address: ", r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)"),
    ("A hex color: ", r"#[0-9a-fA-F]{6}"),
    ("Write an email address: ", r"[a-z]{1,10}\.[a-z]{1,10}@[a-z]{2,10}\.(com|org|net)"),
    ("Name a primary color: ", r"(red|green|blue)"),
    ("A time of day: ", r"([01]\d|2[0-3]):[0-5]\d"),
]


class StructuredOutput(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Serve(MODEL, ("--kv-cache-memory", "256MiB",
                              "--worker-arg=--spec-proposer=ngram"), timeout=300)
        cls.c = Client(cls.s.address, timeout=1800)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        code = cls.s.stop()
        assert code == 0, "deras serve exited with %d" % code

    def serving(self):
        """The router and the worker answer a plain request."""
        r = self.c.complete("Hello", max_tokens=2, temperature=0, ignore_eos=True)
        self.assertEqual(len(r.token_ids[0]), 2)
        self.assertIsNone(self.s.proc.poll())

    def refused(self, code, words=None, **kw):
        with self.assertRaises(DerasError) as e:
            self.c.complete("x", max_tokens=4, **kw)
        self.assertEqual(e.exception.code, code, str(e.exception))
        for w in words or ():
            self.assertIn(w, e.exception.message)
        return e.exception.message

    # ---- outputs inside their constraint ----

    def test_schema_corpus_validates(self):
        with open(CORPUS) as f:
            corpus = json.load(f)
        self.assertGreaterEqual(len(corpus), 40)
        runs = []
        for case in corpus:
            for temp, seed in ((0.0, None), (0.8, 1), (1.0, 2)):
                kw = dict(max_tokens=600, temperature=temp, json_schema=case["schema"])
                if seed is not None:
                    kw["seed"] = seed
                runs.append((case, temp, self.c.stream(case["prompt"], **kw)))
        bad = []
        for case, temp, st in runs:
            ch = st.collect().choices[0]
            try:
                if ch.finish_reason != "stop":
                    raise ValueError("finish_reason %s" % ch.finish_reason)
                validator(case["schema"]).validate(json.loads(ch.text))
            except (ValueError, jsonschema.ValidationError) as e:
                bad.append("%s at temperature %g: %s: %r" % (case["name"], temp, e, ch.text))
        print("  %d outputs of %d schemas: %d valid" % (len(runs), len(corpus),
                                                        len(runs) - len(bad)))
        self.assertEqual(bad, [], "\n".join(bad))

    def test_regexes_and_grammars_match(self):
        runs = []
        for prompt, rx in REGEXES:
            for temp, seed in ((0.0, 0), (0.9, 3)):
                runs.append((rx, None, self.c.stream(prompt, max_tokens=64, temperature=temp,
                                                     seed=seed, regex=rx)))
        for prompt, g, check in GRAMMARS:
            for temp, seed in ((0.0, 0), (0.9, 3)):
                runs.append((g, check, self.c.stream(prompt, max_tokens=96, temperature=temp,
                                                     seed=seed, grammar=g)))
        for what, check, st in runs:
            ch = st.collect().choices[0]
            self.assertEqual(ch.finish_reason, "stop", (what, ch.text))
            ok = check(ch.text) if check else re.fullmatch(what, ch.text) is not None
            self.assertTrue(ok, "%r does not match %r" % (ch.text, what))

    def test_chat_json_and_stop_string(self):
        r = self.c.chat([{"role": "user", "content": "Give me a JSON object about a cat."}],
                        max_tokens=200, temperature=0,
                        json_schema={"type": "object", "properties": {
                            "name": {"type": "string", "maxLength": 20},
                            "age": {"type": "integer", "minimum": 0, "maximum": 30}},
                            "required": ["name", "age"]})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertIn("age", json.loads(r.text))
        # a stop string is still the router's: the output ends before it
        r = self.c.complete("Numbers: ", max_tokens=40, temperature=0, stop=["5"],
                            regex=r"[0-9](, [0-9]){0,15}")
        self.assertNotIn("5", r.text)
        self.assertEqual(r.choices[0].finish_reason, "stop")

    # ---- batching, n, seeds, speculation ----

    REQS = [
        ("Describe a fictional person as JSON:\n",
         dict(json_schema={"type": "object", "properties": {"name": {"type": "string",
              "maxLength": 30}, "age": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["name", "age"]})),
        ("My phone number is ", dict(regex=r"\(\d{3}\) \d{3}-\d{4}")),
        ("Once upon a time", {}),
        ("An arithmetic expression: ", dict(grammar=GRAMMARS[2][1])),
        ("A JSON object about a dog: ", dict(json_object=True, max_tokens=48)),
        ("The capital of France is", {}),
        ("A list of three fruits as JSON:\n",
         dict(json_schema={"type": "array", "items": {"enum": ["apple", "pear", "plum",
              "fig"]}, "minItems": 3, "maxItems": 3})),
    ]

    def run_set(self, together, **extra):
        """Every request of REQS (greedy, logprobs 2) alone one after another, or all in
        flight at once; returns their choices."""
        def go(prompt, kw):
            args = dict(dict(max_tokens=40, temperature=0, logprobs=2), **kw, **extra)
            return self.c.stream(prompt, **args)
        if together:
            streams = [go(p, kw) for p, kw in self.REQS]
            return [st.collect().choices[0] for st in streams]
        return [go(p, kw).collect().choices[0] for p, kw in self.REQS]

    def test_batched_equals_alone_and_speculation_changes_nothing(self):
        alone = self.run_set(False, num_speculative_tokens=0)
        together = self.run_set(True, num_speculative_tokens=0)
        speculated = self.run_set(True)
        for i, (a, b, s) in enumerate(zip(alone, together, speculated)):
            same_tokens(self, a, b, "request %d batched" % i)
            same_tokens(self, a, s, "request %d speculated" % i)
        drafts = sum(c.usage.spec_proposed for c in speculated)
        print("  speculation: %d drafts verified, %d stood" %
              (drafts, sum(c.usage.spec_accepted for c in speculated)))
        self.assertGreater(drafts, 0, "the worker speculated")
        # n = 2 with seeds: each sample valid, batched as alone
        schema = self.REQS[0][1]["json_schema"]
        kw = dict(max_tokens=60, temperature=0.9, seed=11, n=2, json_schema=schema)
        solo = self.c.complete(self.REQS[0][0], **kw)
        busy = [self.c.stream(p, max_tokens=30, temperature=0) for p, _ in self.REQS[2:4]]
        both = self.c.stream(self.REQS[0][0], **kw).collect()
        for st in busy:
            st.collect()
        self.assertEqual(solo.token_ids, both.token_ids)
        for ch in solo.choices:
            validator(schema).validate(json.loads(ch.text))

    # ---- the OpenAI door ----

    def http(self, path, body):
        req = urllib.request.Request(self.s.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def test_openai_response_format(self):
        model = self.http_model()
        schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                  "population": {"type": "integer", "minimum": 0}},
                  "required": ["city", "population"]}
        st, b = self.http("/v1/chat/completions", {
            "model": model, "messages": [{"role": "user", "content": "The largest city in Japan?"}],
            "max_tokens": 120, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "city",
                                "strict": True, "schema": schema}}})
        self.assertEqual(st, 200, b)
        validator(schema).validate(json.loads(b["choices"][0]["message"]["content"]))
        st, b = self.http("/v1/chat/completions", {
            "model": model, "messages": [{"role": "user", "content": "A JSON object, please."}],
            "max_tokens": 160, "temperature": 0.7, "seed": 5, "n": 2,
            "response_format": {"type": "json_object"}})
        self.assertEqual(st, 200, b)
        for c in b["choices"]:
            if c["finish_reason"] == "stop":
                self.assertIsInstance(json.loads(c["message"]["content"]), dict)
        st, b = self.http("/v1/completions", {"model": model, "prompt": "Zip code: ",
                                              "max_tokens": 10, "guided_regex": "[0-9]{5}"})
        self.assertEqual(st, 200, b)
        self.assertRegex(b["choices"][0]["text"], r"^[0-9]{5}$")
        st, b = self.http("/v1/completions", {"model": model, "prompt": "x", "max_tokens": 4,
                                              "response_format": {"type": "json_schema",
                                              "json_schema": {"name": "n", "schema": {
                                                  "type": "object", "not": {}}}}})
        self.assertEqual(st, 400, b)
        self.assertEqual(b["error"]["code"], "invalid_grammar")
        self.assertIn("not", b["error"]["message"])

    def http_model(self):
        with urllib.request.urlopen(self.s.url + "/v1/models", timeout=30) as r:
            return json.loads(r.read())["data"][0]["id"]

    # ---- hostile requests ----

    def test_hostile_requests(self):
        msg = self.refused("invalid_grammar", ["uniqueItems", "/properties/tags"],
                           json_schema={"type": "object", "properties": {"tags": {
                               "type": "array", "uniqueItems": True}}})
        print("  " + msg)
        self.refused("invalid_grammar", ["multipleOf"], json_schema={"type": "integer",
                                                                    "multipleOf": 3})
        self.refused("invalid_grammar", json_schema='{"type": ')
        self.refused("invalid_grammar", json_schema={"$ref": "#/$defs/missing"})
        self.refused("invalid_grammar", ["nowhere"], grammar='root ::= "a" nowhere')
        self.refused("invalid_grammar", grammar='root ::= root "a"')  # left recursion
        self.refused("invalid_grammar", grammar="root ::= " + "(" * 5000 + '"a"' + ")" * 5000)
        self.refused("limit_exceeded", grammar='root ::= "' + "a" * 300000 + '"')
        self.refused("invalid_grammar", ["4096"], grammar='root ::= ("ab"){5000}')
        self.refused("invalid_grammar", regex="[a-z]{1,100000}")
        self.refused("invalid_grammar", regex="(?=lookahead)")
        self.refused("invalid_grammar", regex="(a")
        self.refused("invalid_grammar", json_schema={"type": "object", "properties": {
            "a" * 10: {"anyOf": [{"type": "string"}] * 3}}, "allOf": [{}, {}]})
        deep = {"type": "integer"}
        for _ in range(200):
            deep = {"type": "array", "items": deep}
        self.refused("invalid_grammar", json_schema=json.dumps(deep))
        self.refused("invalid_field", ["at most one"], regex="a", json_object=True)
        # a huge alternation starts with a parse stack per word: past the matcher's budget,
        # refused before admission; a large one is served
        words = "|".join("w%05d" % i for i in range(5000))
        self.refused("invalid_grammar", ["stacks"], regex="(" + words + ")")
        words = "|".join("w%03d" % i for i in range(500))
        r = self.c.complete("A word: ", max_tokens=8, regex="(" + words + ")")
        self.assertRegex(r.text, r"^w\d{3}$")
        # accepted and bounded: catastrophic regexes (no backtracking)
        for rx in (r"(a*)*b", r"(a|a)*c", r"(x+x+)+y", r"(.*a){12}"):
            r = self.c.complete("Letters: ", max_tokens=24, temperature=0, regex=rx)
            if r.choices[0].finish_reason == "stop":
                self.assertIsNotNone(re.fullmatch(rx, r.text), (rx, r.text))
        # a run-time budget: "(" forced past the matcher's depth
        bias = {i: 100 for i in self.paren_ids()}
        with self.assertRaises(DerasError) as e:
            self.c.complete("Nest: ", max_tokens=600, temperature=0, logit_bias=bias,
                            grammar='root ::= "(" root ")" | "x"')
        self.assertEqual(e.exception.code, "grammar_budget_exceeded", str(e.exception))
        self.serving()

    def paren_ids(self):
        """Token ids whose text is only opening parentheses (via the HTTP /tokenize route)."""
        ids = set()
        for text in ("(", "((", "((("):
            st, b = self.http("/tokenize", {"prompt": text, "add_special_tokens": False})
            self.assertEqual(st, 200, b)
            if len(b["tokens"]) == 1:
                ids.add(b["tokens"][0])
        self.assertTrue(ids)
        return sorted(ids)


if __name__ == "__main__":
    unittest.main(verbosity=2)
