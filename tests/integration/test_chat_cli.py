#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_chat_cli - `deras chat` against `deras serve` on the tiny model (issue 13).

  pipe      lines through a pipe: every answer streams to stdout; the conversation is
            kept (each turn's prompt holds the turns before it: its prompt tokens, from
            --usage, grow by more than the last answer), /system adds a system message,
            /reset forgets the turns but keeps it, an unknown /command is named, /quit
            leaves before the lines after it, the end of input quits (exit 0 both)
  terminal  the same program on a pseudo-terminal it controls: the line editor (Left and
            an insert, Up to recall a line, Backspace), Ctrl-C at the prompt abandons the
            line, Ctrl-C during an answer cancels it and returns to the prompt without
            keeping the turn, Ctrl-D quits (exit 0)
  no router `deras chat` where nothing listens: exit 1 at once, naming the address

The worker's steps are slowed by the test-only DERAS_TEST_STEP_DELAY_MS (30 ms), so an
answer of 1,000 tokens lasts at least 30 s by construction, and with --ignore-eos only
max_tokens ends it (a chat adds no end-of-turn stops then): the terminal test's Ctrl-C
always lands inside it. Nothing is timed; waits have generous hang guards.
"""

import fcntl
import os
import re
import select
import subprocess
import sys
import termios
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import DERAS, STEP_DELAY, Serve, free_port  # noqa: E402

HANG_S = 120
USAGE = re.compile(r"\[prompt (\d+) tokens, answer (\d+) tokens, (\w+)\]")


class ChatCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Serve(env={STEP_DELAY: "30"})
        cls.address = cls.s.address

    @classmethod
    def tearDownClass(cls):
        code = cls.s.stop()
        assert code == 0, "deras serve exited with %d" % code

    def chat(self, lines, *args):
        r = subprocess.run([DERAS, "chat", "--address", self.address, "--usage",
                            "--temperature", "0", "--ignore-eos", "--max-tokens", "6", *args],
                           input="".join(l + "\n" for l in lines), capture_output=True,
                           text=True, errors="replace", timeout=HANG_S)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout, r.stderr

    def test_pipe(self):
        out, err = self.chat(["Hello there", "What next?", "/system Be terse.", "And now?",
                              "", "/reset", "Hi", "/bogus"])
        turns = [(int(p), int(a), f) for p, a, f in USAGE.findall(err)]
        self.assertEqual(len(turns), 4, err)
        self.assertTrue(all(a == 6 and f == "length" for _, a, f in turns), turns)
        (p1, _, _), (p2, _, _), (p3, _, _), (p4, _, _) = turns
        self.assertGreater(p2, p1 + 6)   # turn 2 holds turn 1 and its answer
        self.assertGreater(p3, p2 + 6)   # turn 3 holds both, and a system message
        self.assertLess(p4, p3 - 12)     # after /reset: the system message and "Hi" only
        self.assertIn("[system message: Be terse.]", err)
        self.assertIn("[the conversation is forgotten; the system message stays]", err)
        self.assertIn("[unknown command /bogus]", err)
        self.assertEqual(len([l for l in out.split("\n") if l]), 4, out)
        # the same system message from the start, without /reset: the same first prompt
        _, err2 = self.chat(["Hi"], "--system", "Be terse.")
        self.assertEqual(int(USAGE.findall(err2)[0][0]), p4)
        # /quit leaves before what follows it
        _, err3 = self.chat(["Hi", "/quit", "Never sent"])
        self.assertEqual(len(USAGE.findall(err3)), 1, err3)

    def test_no_router(self):
        r = subprocess.run([DERAS, "chat", "--address", "tcp://127.0.0.1:%d" % free_port()],
                           input="Hi\n", capture_output=True, text=True, timeout=HANG_S)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no deras-router answers at tcp://127.0.0.1", r.stderr)

    def test_terminal(self):
        master, slave = os.openpty()

        def controlling_tty():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        p = subprocess.Popen([DERAS, "chat", "--address", self.address, "--usage",
                              "--ignore-eos", "--max-tokens", "1000"], stdin=slave,
                             stdout=slave, stderr=slave, preexec_fn=controlling_tty,
                             close_fds=True)
        os.close(slave)
        seen = bytearray()

        def expect(text, after=0):
            """Read the terminal until text appears past offset `after` (b"": until
            anything does); where it ends."""
            deadline = time.monotonic() + HANG_S
            while True:
                i = seen.find(text, after)
                if i >= 0 and (text or i < len(seen)):
                    return i + len(text)
                left = deadline - time.monotonic()
                self.assertGreater(left, 0, "never saw %r in %r" % (text, bytes(seen[-2000:])))
                r, _, _ = select.select([master], [], [], left)
                if r:
                    try:
                        seen.extend(os.read(master, 65536))
                    except OSError:  # the child closed the terminal
                        self.fail("the terminal closed before %r: %r" % (text, bytes(seen)))

        try:
            at = expect(b"deras chat with")
            at = expect(b"> ", at)
            # Left, then an insert: "/system ac" becomes "/system abc"
            os.write(master, b"/system ac\x1b[Db\r")
            at = expect(b"[system message: abc]", at)
            at = expect(b"> ", at)
            # Up recalls it; three Backspaces and new text edit the recalled line
            os.write(master, b"\x1b[A\x7f\x7f\x7fdef\r")
            at = expect(b"[system message: def]", at)
            at = expect(b"> ", at)
            # Ctrl-C at the prompt abandons the line: nothing is sent
            os.write(master, b"never sent\x03")
            at = expect(b"^C", at)
            at = expect(b"> ", at)
            # Ctrl-C inside an answer (1,000 tokens at >= 30 ms a step: >= 30 s)
            os.write(master, b"Tell me a story\r")
            at = expect(b"Tell me a story", at)
            at = expect(b"\r\n", at)  # Enter: the line is sent
            at = expect(b"", at)  # the answer has begun streaming
            os.write(master, b"\x03")
            at = expect(b"[cancelled: this turn is not kept]", at)
            at = expect(b"> ", at)
            self.assertIsNone(p.poll())
            self.assertNotIn(b"[prompt ", bytes(seen))  # no answer completed: none counted
            self.assertNotIn(b"never sent\r\n", bytes(seen))
            # Ctrl-D on an empty line quits
            os.write(master, b"\x04")
            self.assertEqual(p.wait(HANG_S), 0)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            os.close(master)


if __name__ == "__main__":
    unittest.main(verbosity=2)
