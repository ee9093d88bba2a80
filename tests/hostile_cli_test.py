#!/usr/bin/python3
"""The attnscore CLI used as a hostile user would (docs/reliability.md):
outputs that collide, are not regular files, cannot all be renamed, or are
written by two runs at once; inputs whose outputs would be huge; names from
files that hold control bytes; integers and flags at their edges.

Every bad case must exit 2 with one "attnscore: error:" line naming the
problem, leave no output and no staging file behind, and change nothing
that was there.

Run: /usr/bin/python3 tests/hostile_cli_test.py CLI [--sanitized] [-v]
(--sanitized: the CLI is an ASan build, whose shadow memory makes resident
memory meaningless, so the memory bounds are not checked.)
"""

import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

CLI = None
SANITIZED = False
GOOD_BOUND_KB = 20 * 1024  # peak RSS allowed for refusing bad input


def run(args, cwd=None, preexec_fn=None, env=None):
    """Runs the CLI; returns (exit code, stdout, stderr)."""
    process = subprocess.Popen([CLI] + args, cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, preexec_fn=preexec_fn, env=env)
    out, err = process.communicate(timeout=120)
    return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def run_measured(args, cwd):
    """Runs the CLI in `cwd`; returns (exit code, stderr, its peak resident
    memory in KiB). GNU time reports it: a child forked from this Python
    would count Python's own pages in its peak."""
    report = os.path.join(cwd, "rss.txt")
    process = subprocess.run(["/usr/bin/time", "-q", "-f", "%M", "-o", report, CLI] + args,
                             cwd=cwd, capture_output=True, text=True, timeout=120)
    with open(report) as f:
        rss_kb = int(f.read().split()[-1])
    os.unlink(report)
    return process.returncode, process.stderr, rss_kb


def slurp(path):
    with open(path, "rb") as f:
        return f.read()


def write_safetensors(path, tensors):
    """A .safetensors file of float32 tensors {name: array}, names as given."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class HostileCli(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="attnscore_hostile_")
        os.chmod(self.dir, 0o755)
        rng = np.random.default_rng(7)
        self.q = rng.standard_normal((2, 4, 8)).astype(np.float32)
        self.k = rng.standard_normal((2, 6, 8)).astype(np.float32)
        self.v = rng.standard_normal((2, 6, 5)).astype(np.float32)
        for name in "qkv":
            np.save(self.path(name + ".npy"), getattr(self, name))

    def tearDown(self):
        subprocess.run(["chattr", "-R", "-i", self.dir], stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir)

    def path(self, *names):
        return os.path.join(self.dir, *names)

    def dot(self, out, weights=None, extra=()):
        args = ["run", "dot", "--queries", self.path("q.npy"), "--keys", self.path("k.npy"),
                "--values", self.path("v.npy"), "--out", out]
        if weights is not None:
            args += ["--weights-out", weights]
        return args + list(extra)

    def leftovers(self, directory=None):
        return [n for n in os.listdir(directory or self.dir)
                if n.startswith(".attnscore") or ".tmp." in n]

    def expect_bad_input(self, result, part, absent=()):
        code, _, err = result[:3]
        self.assertEqual(code, 2, err)
        self.assertTrue(err.startswith("attnscore: error: "), err)
        self.assertEqual(err.count("\n"), 1, repr(err))
        self.assertNotIn("\x1b", err)
        self.assertIn(part, err)
        for path in absent:
            self.assertFalse(os.path.lexists(path), path + " was left behind")
        self.assertEqual(self.leftovers(), [])

    # ---- outputs -------------------------------------------------------

    def test_same_file_named_two_ways_while_absent(self):
        for other in ["./o.npy", "sub/../o.npy", self.path("o.npy")]:
            os.makedirs(self.path("sub"), exist_ok=True)
            result = run(self.dot("o.npy", other), cwd=self.dir)
            self.expect_bad_input(result, "name the same file", [self.path("o.npy")])

    def test_same_file_through_a_symlink_and_a_hard_link(self):
        np.save(self.path("o.npy"), np.zeros(3, np.float32))
        os.symlink("o.npy", self.path("link.npy"))
        os.link(self.path("o.npy"), self.path("hard.npy"))
        before = slurp(self.path("o.npy"))
        for other in ["link.npy", "hard.npy"]:
            result = run(self.dot("o.npy", other), cwd=self.dir)
            self.expect_bad_input(result, "name the same file")
            self.assertEqual(slurp(self.path("o.npy")), before)

    def test_outputs_that_are_not_regular_files(self):
        # A character device of our own (the null device's numbers), so that
        # a CLI that replaced it would not take the machine's /dev/null.
        targets = [(self.path("fifo"), "a FIFO", stat.S_ISFIFO),
                   (self.path("adir"), "a directory", stat.S_ISDIR)]
        os.mkfifo(self.path("fifo"))
        os.mkdir(self.path("adir"))
        try:
            os.mknod(self.path("null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            targets.append((self.path("null"), "a character device", stat.S_ISCHR))
        except PermissionError:
            pass  # not root: the FIFO and the directory still run
        for target, kind, is_kind in targets:
            result = run(self.dot(target))
            self.expect_bad_input(result, "is " + kind)
            self.assertTrue(is_kind(os.stat(target).st_mode), target + " was replaced")

    def test_output_in_a_missing_directory_or_empty(self):
        self.expect_bad_input(run(self.dot(self.path("nowhere", "o.npy"))), "does not exist")
        self.expect_bad_input(run(self.dot("")), "empty path")

    def test_longest_names_land(self):
        for length in (230, 255):
            name = "o" * (length - 4) + ".npy"
            code, _, err = run(self.dot(name, "w" * (length - 4) + ".npy"), cwd=self.dir)
            self.assertEqual(code, 0, err)
            self.assertEqual(np.load(self.path(name)).shape, (2, 4, 5))
            self.assertEqual(self.leftovers(), [])

    def test_output_through_a_symlink_lands_in_its_target(self):
        os.mkdir(self.path("real"))
        np.save(self.path("real", "o.npy"), np.zeros(1, np.float32))
        os.symlink(self.path("real", "o.npy"), self.path("o.npy"))
        code, _, err = run(self.dot(self.path("o.npy")))
        self.assertEqual(code, 0, err)
        self.assertTrue(os.path.islink(self.path("o.npy")))
        self.assertEqual(np.load(self.path("real", "o.npy")).shape, (2, 4, 5))

    def test_a_failed_second_rename_restores_the_first(self):
        # As root, renaming over an immutable file fails (EPERM); the first
        # output, already landed, must get its old content back.
        np.save(self.path("o.npy"), np.full(3, 7, np.float32))
        np.save(self.path("w.npy"), np.full(3, 9, np.float32))
        old_o = slurp(self.path("o.npy"))
        old_w = slurp(self.path("w.npy"))
        if subprocess.run(["chattr", "+i", self.path("w.npy")],
                          stderr=subprocess.DEVNULL).returncode != 0:
            self.skipTest("chattr +i needs root on a filesystem with the immutable flag")
        result = run(self.dot(self.path("o.npy"), self.path("w.npy")))
        self.assertEqual(result[0], 2, result[2])
        self.assertIn("--weights-out", result[2])
        self.assertEqual(slurp(self.path("o.npy")), old_o)
        self.assertEqual(slurp(self.path("w.npy")), old_w)
        subprocess.run(["chattr", "-i", self.path("w.npy")], check=True)
        self.assertEqual(self.leftovers(), [])

    def test_sticky_directory_as_another_user(self):
        # The example: in a sticky directory another user's file
        # cannot be replaced; the run must fail before or undo any change.
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            self.skipTest("needs root and setpriv to run the CLI as nobody")
        # The checkout may sit in a folder nobody cannot enter (a 0700
        # home, a `mktemp -d`): the CLI and its library are copied, in the
        # build's layout (bin/attnscore, libattnscore.so.* one folder up),
        # to a folder nobody can read. The CLI finds the library by its
        # $ORIGIN-relative run path, as a relocated build or install does.
        tools = tempfile.mkdtemp(prefix="attnscore_cli_")
        os.chmod(tools, 0o755)
        try:
            os.mkdir(os.path.join(tools, "bin"), 0o755)
            cli = os.path.join(tools, "bin", "attnscore")
            shutil.copy(CLI, cli)
            lib_dir = os.path.dirname(os.path.dirname(os.path.abspath(CLI)))
            for name in os.listdir(lib_dir):
                if name.startswith("libattnscore.so"):
                    shutil.copy(os.path.join(lib_dir, name), tools)  # symlinks followed
            sticky = self.path("sticky")
            os.mkdir(sticky)
            os.chmod(sticky, 0o1777)
            for name in "qkv":
                os.chmod(self.path(name + ".npy"), 0o644)
            np.save(os.path.join(sticky, "w.npy"), np.full(3, 9, np.float32))  # root's
            old_w = slurp(os.path.join(sticky, "w.npy"))
            env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
            as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", cli]
            for first_exists in (False, True):
                o = os.path.join(sticky, "o.npy")
                if first_exists:
                    subprocess.run(as_nobody + self.dot(o)[0:], env=env, check=True,
                                   stdout=subprocess.DEVNULL)
                    old_o = slurp(o)
                process = subprocess.run(as_nobody + self.dot(o, os.path.join(sticky, "w.npy")),
                                         env=env, capture_output=True, text=True)
                self.assertEqual(process.returncode, 2, process.stderr)
                self.assertEqual(process.stderr.count("\n"), 1, process.stderr)
                self.assertEqual(slurp(os.path.join(sticky, "w.npy")), old_w)
                if first_exists:
                    self.assertEqual(slurp(o), old_o)
                else:
                    self.assertFalse(os.path.exists(o))
                self.assertEqual(self.leftovers(sticky), [])
        finally:
            shutil.rmtree(tools)

    def test_concurrent_runs_land_whole_pairs(self):
        # Two runs x 100 rounds writing the same two outputs from different
        # inputs: every run succeeds and, after each round, out and weights
        # come from the same run.
        v2 = self.v * 2
        np.save(self.path("v2.npy"), v2)
        o, w = self.path("o.npy"), self.path("w.npy")
        runs = [self.dot(o, w), self.dot(o, w)]
        runs[1][runs[1].index("--values") + 1] = self.path("v2.npy")
        runs[1][runs[1].index("--queries") + 1] = self.path("q2.npy")
        np.save(self.path("q2.npy"), self.q[:, ::-1].copy())
        expected = {}
        for n, args in enumerate(runs):
            code, _, err = run(args)
            self.assertEqual(code, 0, err)
            expected[n] = (slurp(o), slurp(w))
        self.assertNotEqual(expected[0][1], expected[1][1])
        failures, mixed = 0, 0
        for _ in range(100):
            processes = [subprocess.Popen([CLI] + args, stderr=subprocess.PIPE) for args in runs]
            for p in processes:
                _, err = p.communicate(timeout=60)
                failures += p.returncode != 0
            pair = (slurp(o), slurp(w))
            mixed += pair not in expected.values()
        self.assertEqual((failures, mixed), (0, 0))
        self.assertEqual(self.leftovers(), [])

    # ---- resources -----------------------------------------------------

    def huge_inputs(self):
        # Attention weights (1, 65536, 16384) would be 4 GiB; V has one row
        # too few for K.
        np.save(self.path("qh.npy"), np.zeros((1, 65536, 1), np.float32))
        np.save(self.path("kh.npy"), np.zeros((1, 16384, 1), np.float32))
        np.save(self.path("vh.npy"), np.zeros((1, 16383, 1), np.float32))
        np.save(self.path("vok.npy"), np.zeros((1, 16384, 1), np.float32))

    def check_cheap_refusal(self, args, part):
        code, err, rss_kb = run_measured(args, cwd=self.dir)
        self.expect_bad_input((code, "", err), part, [self.path("o.npy"), self.path("w.npy")])
        if not SANITIZED:
            self.assertLess(rss_kb, GOOD_BOUND_KB, "peak RSS %d KiB" % rss_kb)

    def test_bad_shapes_with_huge_outputs_cost_nothing(self):
        self.huge_inputs()
        base = ["--queries", "qh.npy", "--keys", "kh.npy", "--out", "o.npy", "--weights-out", "w.npy"]
        self.check_cheap_refusal(["run", "dot", "--values", "vh.npy"] + base, "values has shape")
        write_safetensors(self.path("additive.safetensors"),
                          {"W_q.weight": np.ones((2, 1)), "W_k.weight": np.ones((2, 1)),
                           "w_v.weight": np.ones((1, 2))})
        self.check_cheap_refusal(["run", "additive", "--model", "additive.safetensors",
                                  "--values", "vh.npy"] + base, "values has shape")
        np.save(self.path("lens.npy"), np.array([-1], np.int32))
        self.check_cheap_refusal(["run", "dot", "--values", "vok.npy", "--valid-lens", "lens.npy"]
                                 + base, "valid_lens")
        np.save(self.path("xh.npy"), np.zeros((1, 4096, 1), np.float32))
        np.save(self.path("lens2.npy"), np.array([1, 2], np.int64))
        self.check_cheap_refusal(["run", "softmax", "--x", "xh.npy", "--valid-lens", "lens2.npy",
                                  "--out", "o.npy"], "valid_lens")

    def test_bench_beyond_the_machines_memory(self):
        result = run(["bench", "dot", "--batch", "1048576", "--queries", "1", "--keys", "1",
                      "--query-dim", "2048", "--value-dim", "2048"])
        self.expect_bad_input(result, "of memory")

    def test_threads_beyond_the_maximum(self):
        for threads in ("5000", "1025"):
            self.expect_bad_input(run(["info", "--threads", threads]), "--threads is " + threads)

    # ---- messages ------------------------------------------------------

    def test_names_from_a_file_are_escaped(self):
        write_safetensors(self.path("evil.safetensors"),
                          {"W_q.weight": np.ones((2, 8)), "W_k.weight": np.ones((2, 8)),
                           "w_v.weight": np.ones((1, 2)),
                           "x\nattnscore: error: \x1b[31mred": np.ones(1)})
        result = run(["run", "additive", "--model", self.path("evil.safetensors"), "--queries",
                      self.path("q.npy"), "--keys", self.path("k.npy"), "--values",
                      self.path("v.npy"), "--out", self.path("o.npy")])
        self.expect_bad_input(result, "unexpected tensor", [self.path("o.npy")])
        self.assertIn("\\x0a", result[2])

    def test_a_path_with_control_bytes_stays_one_line(self):
        name = self.path("bad\nname\x1b[0m.npy")
        self.expect_bad_input(run(self.dot(name)[:2] + ["--queries", name] + self.dot("o.npy")[4:]),
                              "\\x0a")

    def test_zero_size_dims_are_named_with_the_file(self):
        np.save(self.path("k0.npy"), np.zeros((2, 0, 8), np.float32))
        args = self.dot(self.path("o.npy"))
        args[args.index("--keys") + 1] = self.path("k0.npy")
        self.expect_bad_input(run(args), "--keys " + self.path("k0.npy") + ": shape (2, 0, 8) has dim 1")
        np.save(self.path("l0.npy"), np.zeros((0,), np.int32))
        self.expect_bad_input(run(self.dot(self.path("o.npy"), extra=["--valid-lens", self.path("l0.npy")])),
                              "--valid-lens " + self.path("l0.npy") + ": shape (0,) has dim 0")

    # ---- parsing -------------------------------------------------------

    def test_integers_are_strict_everywhere(self):
        bench = ["bench", "dot", "--batch", "1", "--queries", "2", "--keys", "4", "--repeat", "1"]
        for lens in ("99999999999999999999999", " +5", "+5", "5 ", "0x10", "-1", "1e3"):
            self.expect_bad_input(run(bench + ["--valid-lens", lens]), "--valid-lens is")
        for flag, value in (("--repeat", "1e3"), ("--threads", "-1"), ("--batch", "2 "),
                            ("--keys", "99999999999999999999")):
            args = [a for a in bench]
            if flag in args:
                args[args.index(flag) + 1] = value
            else:
                args += [flag, value]
            self.expect_bad_input(run(args), flag)

    def test_flag_equals_value(self):
        code, out, err = run(["bench", "dot", "--batch=1", "--queries=2", "--keys=4", "--repeat=1",
                              "--valid-lens=3", "--json"])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["valid_lens"], "3")
        self.expect_bad_input(run(["bench", "dot", "--batch=1", "--queries=2", "--keys=4",
                                   "--json=1"]), "--json takes no value")
        self.expect_bad_input(run(self.dot("x")[:-2] + ["--out="]), "--out needs a value")

    def test_unknown_flags_are_named_unknown(self):
        self.expect_bad_input(run(["bench", "dot", "--bogus", "--batch", "1"]),
                              "unknown flag --bogus")
        self.expect_bad_input(run(["run", "dot", "--bogus=3"]), "unknown flag --bogus")
        self.expect_bad_input(run(self.dot("o.npy", extra=["--batch", "2"])),
                              "unknown flag --batch for 'run dot'")

    def test_help_for_each_command(self):
        for words, part in ((["run", "dot"], "attnscore run dot"),
                            (["run", "concat"], "attnscore run concat"),
                            (["bench"], "attnscore bench"), (["info"], "attnscore info")):
            for args in (words + ["--help"], ["help"] + words):
                code, out, err = run(args)
                self.assertEqual(code, 0, err)
                self.assertIn(part, out)
                self.assertNotIn("attnscore run softmax" if words != ["run", "softmax"]
                                 else "attnscore bench", out)


if __name__ == "__main__":
    CLI = os.path.abspath(sys.argv[1])
    SANITIZED = "--sanitized" in sys.argv
    unittest.main(argv=[sys.argv[0]] + [a for a in sys.argv[2:] if a not in ("--sanitized", "")])
