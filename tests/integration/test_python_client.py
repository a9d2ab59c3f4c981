# SPDX-License-Identifier: Apache-2.0
"""test_python_client.py - the Python client (tools/clients/python) against a fake router.

Runs a FakeRouter (fake_router.py, a ROUTER socket in a thread that speaks the client
protocol) and checks what a user of deras_client sees: completions and streams with their
texts, token ids, finish reasons and usage; exact wire names of every parameter; errors
as DerasError(code, message); timeouts instead of hangs when the router is silent or gone;
several requests in flight on one client; cancel; ping; CURVE encryption.

    python3 tests/integration/test_python_client.py     (exit 77 = skipped: no pyzmq/msgpack)
"""

import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "clients", "python"))

try:
    import msgpack  # noqa: F401
    import zmq
except ImportError as e:
    print("SKIPPED: %s (install python3-zmq and python3-msgpack)" % e)
    sys.exit(77)

import asyncio  # noqa: E402
import tempfile  # noqa: E402

from deras_client import (PARAMS, AsyncClient, Chunk, Client, DerasError,  # noqa: E402
                          DerasTimeout, DerasUnavailable, Final)
from fake_router import FakeRouter  # noqa: E402


def expected_text(n_tokens):
    return "".join("w%d " % i for i in range(n_tokens))


def expected_ids(n_tokens, index=0):
    return [100 + 10 * index + i for i in range(n_tokens)]


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.router = FakeRouter()
        self.router.start()
        self.client = Client(self.router.address, timeout=30.0)

    def tearDown(self):
        self.client.close()
        self.router.stop()

    def requests_received(self):
        return [m for m in self.router.received if m.get("type") == "request"]

    def barrier(self):
        """Once the pong is back, the fake has received everything the client sent before
        the ping (one socket, in order): what it has not received by then was never sent."""
        self.assertEqual(self.client.ping(timeout=30)["type"], "pong")

    # ---- complete ----

    def test_complete_returns_text_ids_finish_reason_and_usage(self):
        c = self.client.complete("hello there", max_tokens=5)
        self.assertEqual(c.text, expected_text(5))
        self.assertEqual(c.token_ids, [expected_ids(5)])
        self.assertEqual(c.finish_reasons, ["length"])
        self.assertEqual(c.usage.prompt_tokens, 2)
        self.assertEqual(c.usage.completion_tokens, 5)
        self.assertGreaterEqual(c.usage.total_ms, 0.0)
        sent = self.requests_received()[0]
        self.assertNotIn("stream", sent, "complete() must send a non-streaming request")
        self.assertEqual(sent["id"], c.id)

    def test_complete_with_n_samples_returns_one_choice_per_index(self):
        c = self.client.complete("x", max_tokens=3, n=3)
        self.assertEqual([ch.index for ch in c.choices], [0, 1, 2])
        for k in range(3):
            self.assertEqual(c.choices[k].token_ids, expected_ids(3, k))
        self.assertEqual(c.usage.completion_tokens, 9)

    def test_complete_stop_finish_reason(self):
        c = self.client.complete("stop:2", max_tokens=10)
        self.assertEqual(c.finish_reasons, ["stop"])
        self.assertEqual(c.text, expected_text(2))

    def test_complete_prompt_ids_are_sent_as_a_list_of_ints(self):
        c = self.client.complete(prompt_ids=[1, 2, 3, 4], max_tokens=1)
        sent = self.requests_received()[0]
        self.assertEqual(sent["prompt_ids"], [1, 2, 3, 4])
        self.assertNotIn("prompt", sent)
        self.assertEqual(c.usage.prompt_tokens, 4)

    def test_logprobs_are_passed_through(self):
        c = self.client.complete("x", max_tokens=2, logprobs=2)
        self.assertEqual(len(c.choices[0].logprobs), 2)
        events = list(self.client.stream("x", max_tokens=2, logprobs=1))
        chunks = [e for e in events if isinstance(e, Chunk)]
        self.assertTrue(all(len(e.logprobs) == 1 for e in chunks))

    # ---- parameters on the wire ----

    def test_every_parameter_goes_out_under_its_wire_name(self):
        params = dict(max_tokens=4, n=2, top_k=5, logprobs=3, seed=7, deadline_ms=1000,
                      temperature=0, top_p=0.9, min_p=0.05, repetition_penalty=1.1,
                      presence_penalty=0.5, frequency_penalty=-0.5, ignore_eos=True,
                      add_special_tokens=False, stop="END", stop_token_ids=[5, 6],
                      num_speculative_tokens=0, min_tokens=2, logit_bias={"5": 1.5, 7: -100},
                      json_schema={"type": "object"}, regex="a+", grammar='root ::= "a"',
                      json_object=True)  # at most one: the router checks, this fake does not
        self.assertEqual(set(params), set(PARAMS), "the test must cover every parameter")
        self.client.complete("p", **params)
        sent = self.requests_received()[0]
        for k, v in params.items():
            self.assertIn(k, sent)
        self.assertEqual(sent["type"], "request")
        self.assertEqual(sent["v"], 1)
        self.assertIsInstance(sent["temperature"], float, "float fields are sent as floats")
        self.assertEqual(sent["stop"], ["END"], "a single stop string is sent as a list")
        self.assertEqual(sent["stop_token_ids"], [5, 6])
        self.assertIs(sent["ignore_eos"], True)
        self.assertEqual(sent["num_speculative_tokens"], 0, "0 (speculation off) is sent")
        self.assertEqual(sent["min_tokens"], 2)
        self.assertEqual(sent["logit_bias"], {5: 1.5, 7: -100.0},
                         "logit_bias goes out as a map of int token ids to floats")

    def test_a_chat_goes_out_as_messages_with_its_options(self):
        messages = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
        tools = [{"type": "function", "function": {"name": "f"}}]
        c = self.client.chat(messages, tools=tools, add_generation_prompt=False,
                             chat_template_kwargs={"enable_thinking": False}, max_tokens=3)
        self.assertEqual(c.text, expected_text(3))
        list(self.client.chat_stream(messages, max_tokens=2))
        sent, streamed = self.requests_received()
        self.assertEqual(sent["messages"], messages)
        self.assertEqual(sent["tools"], tools)
        self.assertIs(sent["add_generation_prompt"], False)
        self.assertEqual(sent["chat_template_kwargs"], {"enable_thinking": False})
        self.assertNotIn("prompt", sent)
        self.assertIs(streamed["stream"], True)
        for k in ("tools", "add_generation_prompt", "chat_template_kwargs", "prompt"):
            self.assertNotIn(k, streamed, "defaults are not sent")
        for bad in ([], ["hi"], "hi"):
            with self.assertRaises(TypeError):
                self.client.chat(bad)
        with self.assertRaises(TypeError):
            self.client.chat(messages, add_generation_prompt=1)

    def test_unknown_or_mistyped_parameter_is_refused_before_sending(self):
        with self.assertRaises(TypeError):
            self.client.complete("p", max_token=4)
        with self.assertRaises(TypeError):
            self.client.complete("p", max_tokens="4")
        with self.assertRaises(TypeError):
            self.client.complete("p", ignore_eos=1)
        with self.assertRaises(TypeError):
            self.client.complete("p", stream=True)
        for bad in ([5, 1.0], {"x": 1.0}, {5: "1"}, {5: 1.0, "5": 2.0}):
            with self.assertRaises(TypeError):
                self.client.complete("p", logit_bias=bad)
        with self.assertRaises(ValueError):
            self.client.complete()
        with self.assertRaises(ValueError):
            self.client.complete("p", prompt_ids=[1])
        self.barrier()
        self.assertEqual(self.requests_received(), [], "nothing may be sent for a bad call")
        self.assertEqual(self.client.in_flight, [])

    # ---- ids ----

    def test_request_ids_are_unique_uuid4_hex_unless_given(self):
        ids = {self.client.complete("p", max_tokens=1).id for _ in range(20)}
        self.assertEqual(len(ids), 20)
        for i in ids:
            self.assertEqual(len(i), 32)
            int(i, 16)
        self.assertEqual(self.client.complete("p", max_tokens=1, id="mine").id, "mine")

    def test_duplicate_live_id_is_refused(self):
        s = self.client.stream("slow", max_tokens=50, id="dup")
        with self.assertRaises(ValueError):
            self.client.stream("slow", id="dup")
        s.close()

    # ---- streams ----

    def test_stream_yields_chunks_then_final(self):
        events = list(self.client.stream("p", max_tokens=4))
        self.assertEqual([type(e) for e in events], [Chunk] * 4 + [Final])
        self.assertEqual("".join(e.text for e in events[:4]), expected_text(4))
        self.assertEqual([t for e in events[:4] for t in e.token_ids], expected_ids(4))
        self.assertEqual(events[-1].finish_reason, "length")
        self.assertIsNone(events[-1].text, "a stream's final carries no text")
        self.assertIs(self.requests_received()[0]["stream"], True)

    def test_stream_with_n_ends_after_every_sample_finished(self):
        s = self.client.stream("p", max_tokens=3, n=2)
        c = s.collect()
        self.assertEqual(c.texts, [expected_text(3)] * 2)
        self.assertEqual(c.token_ids, [expected_ids(3, 0), expected_ids(3, 1)])
        self.assertTrue(s.done)
        self.assertEqual(self.client.in_flight, [])

    def test_several_requests_in_flight_each_get_only_their_events(self):
        a = self.client.stream("slow", max_tokens=6)
        b = self.client.stream("p", max_tokens=3, n=2)
        first = next(a)
        self.assertEqual((first.id, first.text), (a.id, "w0 "))
        c = self.client.complete("p", max_tokens=2)     # while a and b are open
        self.assertEqual(c.text, expected_text(2))
        cb = b.collect()
        ca = a.collect()
        self.assertEqual(ca.text, expected_text(6)[len("w0 "):])
        self.assertEqual(cb.texts, [expected_text(3)] * 2)
        self.assertEqual(self.client.in_flight, [])

    def test_cancel_ends_the_stream_with_abort(self):
        s = self.client.stream("hold:2", max_tokens=1000)  # 2 tokens, then only a cancel ends it
        next(s)
        next(s)
        s.cancel()
        events = list(s)
        self.assertIsInstance(events[-1], Final)
        self.assertEqual(events[-1].finish_reason, "abort")
        self.assertEqual(events[-1].abort_reason, "cancelled")
        self.assertEqual(len(events), 1)
        cancels = [m for m in self.router.received if m.get("type") == "cancel"]
        self.assertEqual(cancels, [{"type": "cancel", "id": s.id}])

    def test_closing_an_unfinished_stream_cancels_it(self):
        with self.client.stream("slow", max_tokens=1000) as s:
            next(s)
        self.barrier()
        cancels = [m for m in self.router.received if m.get("type") == "cancel"]
        self.assertEqual([m["id"] for m in cancels], [s.id])
        # its late events are dropped, the client stays usable
        self.assertEqual(self.client.complete("p", max_tokens=1).text, expected_text(1))

    # ---- errors and timeouts ----

    def test_server_error_raises_deras_error_with_code_and_message(self):
        with self.assertRaises(DerasError) as cm:
            self.client.complete("error:context_length_exceeded")
        self.assertEqual(cm.exception.code, "context_length_exceeded")
        self.assertIn("fake failure", cm.exception.message)
        self.assertNotIsInstance(cm.exception, DerasTimeout)
        s = self.client.stream("error:busy")
        with self.assertRaises(DerasError) as cm:
            next(s)
        self.assertEqual(cm.exception.code, "busy")
        self.assertTrue(s.done)
        self.assertEqual(self.client.in_flight, [])

    def test_router_validation_error_surfaces(self):
        with self.assertRaises(DerasError) as cm:
            self.client.complete("p", n=17)
        self.assertEqual(cm.exception.code, "limit_exceeded")

    def test_silent_router_times_out_and_cancels(self):
        t0 = time.monotonic()
        with self.assertRaises(DerasTimeout) as cm:
            self.client.complete("silent", timeout=0.3)
        dt = time.monotonic() - t0
        self.assertEqual(cm.exception.code, "timeout")
        # never early; late only by scheduling (the upper bound is a hang guard)
        self.assertTrue(0.25 <= dt < 10.0, "timed out after %.2f s, expected about 0.3" % dt)
        self.barrier()
        self.assertIn("cancel", [m.get("type") for m in self.router.received])
        self.assertEqual(self.client.in_flight, [])

    def test_no_router_at_all_times_out_instead_of_hanging(self):
        with Client("tcp://127.0.0.1:1", timeout=0.2) as c:
            t0 = time.monotonic()
            with self.assertRaises(DerasTimeout):
                c.complete("p")
            with self.assertRaises(DerasTimeout):
                c.ping(timeout=0.2)
            self.assertLess(time.monotonic() - t0, 10.0)  # two 0.2 s timeouts, not a hang

    def test_nothing_listening_fails_fast_naming_the_address(self):
        # the request timeout (60 s) would be a hang here; connect_timeout says it sooner
        path = "ipc://%s/no-router.sock" % tempfile.mkdtemp(prefix="deras-none-")
        with Client(path, timeout=60, connect_timeout=0.3) as c:
            t0 = time.monotonic()
            with self.assertRaises(DerasUnavailable) as cm:
                c.complete("p")
            dt = time.monotonic() - t0
            self.assertEqual(cm.exception.code, "unavailable")
            self.assertIn(path, cm.exception.message)
            self.assertIn("is deras-router running", cm.exception.message)
            self.assertTrue(isinstance(cm.exception, DerasTimeout))  # caught as before
            self.assertTrue(0.25 <= dt < 30.0, "%.2f s" % dt)  # never early; a hang guard
            self.assertEqual(c.in_flight, [])
            with self.assertRaises(DerasUnavailable):  # still nothing: at once
                c.ping(timeout=60)

    def test_a_live_router_is_not_unavailable_however_slow(self):
        # connected: only the request's own timeout applies, not connect_timeout
        with Client(self.router.address, timeout=30, connect_timeout=0.01) as c:
            self.assertEqual(c.ping(timeout=30)["type"], "pong")
            self.assertEqual(c.complete("slow", max_tokens=5).text, expected_text(5))

    # ---- ping ----

    def test_ping_returns_the_pong_with_workers(self):
        pong = self.client.ping()
        self.assertEqual(pong["type"], "pong")
        self.assertEqual(pong["workers"][0]["name"], "fake0")
        self.assertEqual(pong["workers"][0]["state"], "ready")

    def test_ping_while_a_stream_is_open_keeps_its_events(self):
        s = self.client.stream("slow", max_tokens=5)
        next(s)
        self.assertEqual(self.client.ping(timeout=30)["type"], "pong")
        self.assertEqual(s.collect().text, expected_text(5)[len("w0 "):])


class CurveTest(unittest.TestCase):
    def setUp(self):
        if not zmq.has("curve"):
            self.skipTest("libzmq without CURVE")
        self.pub, sec = zmq.curve_keypair()
        self.router = FakeRouter(curve_secret_key=sec)
        self.router.start()

    def tearDown(self):
        self.router.stop()

    def test_curve_with_the_server_key_works(self):
        with Client(self.router.address, curve_server_key=self.pub.decode(), timeout=30) as c:
            self.assertEqual(c.complete("p", max_tokens=2).text, expected_text(2))

    def test_curve_with_a_wrong_key_times_out(self):
        wrong, _ = zmq.curve_keypair()
        with Client(self.router.address, curve_server_key=wrong, timeout=0.3) as c:
            with self.assertRaises(DerasTimeout):
                c.complete("p", max_tokens=2)
        self.assertEqual(self.router.received, [])

    def test_plain_client_cannot_talk_to_a_curve_router(self):
        with Client(self.router.address, timeout=0.3) as c:
            with self.assertRaises(DerasTimeout):
                c.ping(timeout=0.3)

    def test_bad_key_is_refused_at_construction(self):
        with self.assertRaises(ValueError):
            Client(self.router.address, curve_server_key="short")


class AsyncClientTest(unittest.TestCase):
    """AsyncClient: the same requests, awaited, many at once on one client."""

    def setUp(self):
        self.router = FakeRouter()
        self.router.start()

    def tearDown(self):
        self.router.stop()

    def run_async(self, coro):
        return asyncio.run(asyncio.wait_for(coro, 120))

    def test_complete_stream_chat_and_ping(self):
        async def go():
            async with AsyncClient(self.router.address, timeout=30) as c:
                done = await c.complete("hello there", max_tokens=5)
                self.assertEqual((done.text, done.token_ids), (expected_text(5),
                                                               [expected_ids(5)]))
                s = await c.stream("x", max_tokens=3, n=2)
                events = [ev async for ev in s]
                self.assertEqual(sum(isinstance(e, Final) for e in events), 2)
                self.assertTrue(s.done)
                texts = {}
                for e in events:
                    if isinstance(e, Chunk):
                        texts[e.index] = texts.get(e.index, "") + e.text
                self.assertEqual(texts, {0: expected_text(3), 1: expected_text(3)})
                answer = await c.chat([{"role": "user", "content": "hi"}], max_tokens=4)
                self.assertEqual(answer.text, expected_text(4))
                pong = await c.ping(timeout=30)
                self.assertEqual(pong["workers"][0]["name"], "fake0")
                self.assertEqual(c.in_flight, [])
        self.run_async(go())
        sent = [m for m in self.router.received if m.get("type") == "request"]
        self.assertEqual([("stream" in m, "messages" in m) for m in sent],
                         [(False, False), (True, False), (False, True)])

    def test_many_requests_at_once_each_get_their_own_answer(self):
        async def go():
            async with AsyncClient(self.router.address, timeout=30) as c:
                tasks = [c.complete("slow" if i % 2 else "p", max_tokens=2 + i % 5,
                                    id="r%d" % i) for i in range(16)]
                done = await asyncio.gather(*tasks)
                for i, d in enumerate(done):
                    self.assertEqual((d.id, d.text), ("r%d" % i, expected_text(2 + i % 5)))
        self.run_async(go())

    def test_errors_timeouts_cancel_and_unavailable(self):
        async def go():
            async with AsyncClient(self.router.address, timeout=30) as c:
                with self.assertRaises(DerasError) as cm:
                    await c.complete("error:busy", max_tokens=2)
                self.assertEqual(cm.exception.code, "busy")
                with self.assertRaises(DerasTimeout):
                    await c.complete("silent", timeout=0.3)
                s = await c.stream("slow", max_tokens=500)
                first = await s.__anext__()
                self.assertIsInstance(first, Chunk)
                await s.cancel()
                rest = [ev async for ev in s]
                self.assertEqual(rest[-1].finish_reason, "abort")
                self.assertEqual(c.in_flight, [])
            path = "ipc://%s/none.sock" % tempfile.mkdtemp(prefix="deras-none-")
            async with AsyncClient(path, timeout=60, connect_timeout=0.3) as c:
                with self.assertRaises(DerasUnavailable) as cm:
                    await c.complete("p")
                self.assertIn(path, cm.exception.message)
        self.run_async(go())
        types = [m.get("type") for m in self.router.received]
        self.assertIn("cancel", types)


if __name__ == "__main__":
    unittest.main(verbosity=2)
