# SPDX-License-Identifier: Apache-2.0
"""test_chat_e2e.py - chat requests end to end on the test model (SmolLM2-135M-Instruct).

Starts deras-router and one deras-worker on $DERAS_TEST_MODEL (a GGUF file), then checks
that a chat request is the model's own chat template rendered as Python Jinja2 renders it
(tests/ref/jinja_reference.py, transformers' environment) and nothing else: for each
conversation the same text, rendered by Jinja2 here and sent as a `prompt` without added
special tokens, must give the router the same number of prompt tokens and, greedy, the same
answer token for token; a conversation Jinja2 fails on fails as chat_template_error. Then
that a chat answer ends with finish_reason "stop" at the model's end of turn (the haiku the
README asks for) unless ignore_eos, that streams and the C client's `deras complete --chat`
agree with it, and that broken conversations get their error codes.

    DERAS_BUILD_DIR=build DERAS_TEST_MODEL=model.gguf python3 tests/integration/test_chat_e2e.py
Exit 77 (skipped) without pyzmq/msgpack, python3-jinja2, the built binaries or the model
(a missing model fails instead under DERAS_REQUIRE_MODEL=1).
"""

import os
import struct
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
# cluster checks pyzmq/msgpack and the built binaries (exit 77 where they are missing)
from cluster import DERAS, Chunk, Cluster, DerasError  # noqa: E402

try:
    import jinja_reference  # noqa: E402  (needs python3-jinja2)
except ImportError as e:
    print("SKIPPED: %s (install python3-jinja2)" % e)
    sys.exit(77)

MODEL = os.environ.get("DERAS_TEST_MODEL", "")
if not os.path.exists(MODEL):
    if os.environ.get("DERAS_REQUIRE_MODEL") == "1":
        print("FAILED: test model not found at %r" % MODEL)
        sys.exit(1)
    print("SKIPPED: test model not found (DERAS_TEST_MODEL=%r)" % MODEL)
    sys.exit(77)


def gguf_metadata(path, keys):
    """The values of `keys` in a GGUF file's metadata (strings, integers, string arrays)."""
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
              10: "<Q", 11: "<q", 12: "<d"}
    with open(path, "rb") as f:
        def read(fmt):
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def string():
            return f.read(read("<Q")).decode("utf-8")

        def value(t):
            if t == 8:
                return string()
            if t == 9:
                et, n = read("<I"), read("<Q")
                return [value(et) for _ in range(n)]
            return read(scalar[t])

        if f.read(4) != b"GGUF":
            raise ValueError("%s is not a GGUF file" % path)
        read("<I")
        read("<Q")
        out = {}
        for _ in range(read("<Q")):
            key = string()
            t = read("<I")
            v = value(t)
            if key in keys:
                out[key] = v
        return out


META = gguf_metadata(MODEL, {"tokenizer.chat_template", "tokenizer.ggml.tokens",
                             "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"})
TOKENS = META["tokenizer.ggml.tokens"]
SPECIALS = {"bos_token": TOKENS[META["tokenizer.ggml.bos_token_id"]],
            "eos_token": TOKENS[META["tokenizer.ggml.eos_token_id"]]}
TEMPLATE = jinja_reference.make_env().from_string(META["tokenizer.chat_template"])


def jinja2_render(messages, add_generation_prompt=True, tools=None, **kwargs):
    """What transformers' apply_chat_template renders for this conversation."""
    ctx = dict(SPECIALS, **kwargs)
    return TEMPLATE.render(messages=messages, tools=tools, documents=None,
                           add_generation_prompt=add_generation_prompt, **ctx)


CONVERSATIONS = {
    "user only": ([{"role": "user", "content": "What is the capital of France?"}], {}),
    "system and user": ([{"role": "system", "content": "You answer in one word."},
                         {"role": "user", "content": "Name a colour."}], {}),
    "multi-turn": ([{"role": "user", "content": "Hi!"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Count to three, café style. \u00e9\u4e2d"}], {}),
    # SmolLM2's template concatenates content as a string: Jinja2 raises on parts, and so
    # must the router (chat_template_error)
    "text parts": ([{"role": "user", "content": [{"type": "text", "text": "Say "},
                                                 {"type": "text", "text": "yes."}]}], {}),
    "no generation prompt": ([{"role": "user", "content": "Finish this: once upon"}],
                             {"add_generation_prompt": False}),
    "tool result": ([{"role": "user", "content": "What is 2+2?"},
                     {"role": "assistant", "content": "",
                      "tool_calls": [{"type": "function", "id": "c1", "function":
                                      {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "4"}], {}),
}


class Chat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster(model=MODEL, n_workers=1, kv="256MiB",
                              router_args=("--stuck-timeout-ms", "600000"))
        cls.client = cls.cluster.client

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def test_a_chat_is_the_template_rendered_as_jinja2_renders_it(self):
        for name, (messages, opts) in CONVERSATIONS.items():
            with self.subTest(name):
                try:
                    text = jinja2_render(messages, **opts)
                except Exception as jinja2_error:  # the template fails on it: so must we
                    with self.assertRaises(DerasError) as e:
                        self.client.chat(messages, max_tokens=8, **opts)
                    self.assertEqual(e.exception.code, "chat_template_error", str(jinja2_error))
                    continue
                via_chat = self.client.chat(messages, max_tokens=8, temperature=0, **opts)
                via_text = self.client.complete(text, add_special_tokens=False, max_tokens=8,
                                                temperature=0)
                self.assertEqual(via_chat.usage.prompt_tokens, via_text.usage.prompt_tokens)
                self.assertEqual(via_chat.token_ids, via_text.token_ids)
                self.assertEqual(via_chat.text, via_text.text)

    def test_a_chat_answer_ends_at_the_end_of_its_turn(self):
        messages = [{"role": "user", "content": "Write a haiku about the sea."}]
        c = self.client.chat(messages, max_tokens=200, temperature=0)
        self.assertEqual(c.finish_reasons, ["stop"])
        self.assertLess(c.usage.completion_tokens, 200)
        self.assertGreater(len(c.text.strip()), 10)
        self.assertNotIn("<|im_end|>", c.text)
        # with ignore_eos (vLLM's semantics) the turn's end does not stop it: the same
        # greedy tokens, then on past the end of the turn to max_tokens
        k = c.usage.completion_tokens
        more = self.client.chat(messages, max_tokens=k + 4, temperature=0, ignore_eos=True)
        self.assertEqual(more.finish_reasons, ["length"])
        self.assertEqual(more.usage.completion_tokens, k + 4)
        self.assertEqual(more.token_ids[0][:len(c.token_ids[0])], c.token_ids[0])
        # streamed, the same answer
        events = list(self.client.chat_stream(messages, max_tokens=200, temperature=0))
        self.assertEqual("".join(e.text for e in events if isinstance(e, Chunk)), c.text)
        self.assertEqual(events[-1].finish_reason, "stop")
        # and the C client's deras complete --chat prints it
        out = subprocess.run([DERAS, "complete", "--address", self.cluster.address, "--chat",
                              "--max-tokens", "200", "--temperature", "0",
                              "Write a haiku about the sea."],
                             capture_output=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        self.assertEqual(out.stdout.decode().strip(), c.text.strip())

    def test_broken_conversations_get_their_codes(self):
        cases = [
            ([{"role": "bot", "content": "hi"}], "invalid_field"),
            ([{"role": "user"}], "missing_field"),
            ([{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}],
             "invalid_field"),
            ([{"role": "user", "content": 5}], "invalid_field"),
            ([{"role": "user", "content": "x"}] * 1025, "limit_exceeded"),
        ]
        for messages, code in cases:
            with self.subTest(code=code, first=messages[0]):
                with self.assertRaises(DerasError) as e:
                    self.client.chat(messages, max_tokens=4)
                self.assertEqual(e.exception.code, code)
        with self.assertRaises(DerasError) as e:
            self.client.chat([{"role": "user", "content": "x"}], max_tokens=4,
                             chat_template_kwargs={"messages": []})
        self.assertEqual(e.exception.code, "invalid_field")
        # 16 stop ids of the client's own leave no room for the model's end of turn
        with self.assertRaises(DerasError) as e:
            self.client.chat([{"role": "user", "content": "x"}], max_tokens=4,
                             stop_token_ids=list(range(100, 116)))
        self.assertEqual(e.exception.code, "limit_exceeded")
        # the router still serves
        ok = self.client.chat([{"role": "user", "content": "Hi"}], max_tokens=2)
        self.assertGreater(ok.usage.completion_tokens, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
